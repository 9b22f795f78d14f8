"""Random access to the records of TFRecord files, by an index of offsets.

tfds prepares data sets as TFRecord files by default, and TFRecord has no
index: tf.data can only stream it. A training order that is a pure function of
(seed, step) needs record i on demand, so each file's record offsets are found
once by hopping from header to header (12 bytes read per record, the payload
is skipped), which takes seconds for all of ImageNet on a local disk. On
remote storage that is one small read per record, and every process of every
run would pay it: so the offsets are stored once beside the file,
`<file>.offsets.npz`, and read from there afterwards (a rewritten file, whose
size differs, is scanned again). Where the data directory is read-only, each
process scans for itself. Array-record data sets do not need any of this:
they have random access of their own.
"""

import bisect
import dataclasses
import io
import itertools
import os
import struct
import uuid

from absl import logging
import numpy as np

SIDECAR_SUFFIX = '.offsets.npz'

# A record is: uint64 length, uint32 CRC of the length, payload, uint32 CRC.
_HEADER = 12
_FOOTER = 4


@dataclasses.dataclass(frozen=True)
class Shard:
  """Records [skip, skip + take) of one TFRecord file belong to the split."""
  path: str
  skip: int
  take: int


def _open(path: str):
  if '://' in path:
    # Remote file systems (gs://, s3://) through TensorFlow's file layer.
    # pylint: disable-next=g-import-not-at-top
    from input_pipeline.tf_setup import tf
    return tf.io.gfile.GFile(path, 'rb')
  # Unbuffered: a buffered reader would read a whole buffer for every
  # 12-byte header it is asked for.
  return open(path, 'rb', buffering=0)


def scan_offsets(path: str, count: int) -> tuple[np.ndarray, np.ndarray]:
  """Payload (offsets, lengths) of the first `count` records of a file."""
  offsets = np.empty(count, np.int64)
  lengths = np.empty(count, np.int64)
  position = 0
  with _open(path) as f:
    for i in range(count):
      f.seek(position)
      header = f.read(_HEADER)
      if len(header) < _HEADER:
        # A truncated file: the missing records read as empty, which fails
        # to parse and is counted as unreadable, like any corrupt record.
        offsets[i:], lengths[i:] = position, 0
        break
      (length,) = struct.unpack('<Q', header[:8])
      offsets[i], lengths[i] = position + _HEADER, length
      position += _HEADER + length + _FOOTER
  return offsets, lengths


def _size(path: str) -> int:
  if '://' in path:
    from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.stat(path).length
  return os.path.getsize(path)


def _read_sidecar(path: str, size: int, count: int):
  try:
    with _open(path + SIDECAR_SUFFIX) as f:
      saved = np.load(io.BytesIO(f.read()))
      if int(saved['file_size']) == size and len(saved['offsets']) >= count:
        return saved['offsets'][:count], saved['lengths'][:count]
  except (OSError, ValueError, KeyError):
    pass  # absent, unreadable or stale: scan
  except Exception as e:  # pylint: disable=broad-except
    if 'NotFound' not in type(e).__name__:  # tf.errors from remote file systems
      raise
  return None


def _write_sidecar(path: str, size: int, offsets, lengths) -> None:
  """Writes the offsets beside the file, atomically (a temporary name, then
  a rename), so that processes writing at once leave one whole file."""
  buffer = io.BytesIO()
  np.savez(buffer, offsets=offsets, lengths=lengths, file_size=np.int64(size))
  final, temporary = path + SIDECAR_SUFFIX, f'{path}{SIDECAR_SUFFIX}.tmp-{uuid.uuid4().hex}'
  try:
    if '://' in path:
      from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
      with tf.io.gfile.GFile(temporary, 'wb') as f:
        f.write(buffer.getvalue())
      tf.io.gfile.rename(temporary, final, overwrite=True)
    else:
      with open(temporary, 'wb') as f:
        f.write(buffer.getvalue())
      os.replace(temporary, final)
  except Exception as e:  # pylint: disable=broad-except
    logging.log_first_n(logging.WARNING, 'Cannot store the record index beside '
                        '%s (%s); every run will scan it again', 1, path, e)


def load_offsets(path: str, count: int) -> tuple[np.ndarray, np.ndarray]:
  """scan_offsets, through the stored index beside the file when there is one."""
  size = _size(path)
  stored = _read_sidecar(path, size, count)
  if stored is not None:
    return stored
  offsets, lengths = scan_offsets(path, count)
  _write_sidecar(path, size, offsets, lengths)
  return offsets, lengths


class TFRecordIndex:
  """Records of a split spread over TFRecord shards, read by index."""

  def __init__(self, shards: list[Shard]):
    self._shards = [s for s in shards if s.take > 0]
    self._starts = np.cumsum([0] + [s.take for s in self._shards]).tolist()
    self._index: dict[int, tuple[np.ndarray, np.ndarray]] = {}

  def __len__(self) -> int:
    return self._starts[-1]

  def _offsets(self, shard_id: int) -> tuple[np.ndarray, np.ndarray]:
    # Indexed on first use: a process reads only some shards at first, and
    # start-up should not wait for the files nobody has asked for yet.
    if shard_id not in self._index:
      shard = self._shards[shard_id]
      offsets, lengths = load_offsets(shard.path, shard.skip + shard.take)
      self._index[shard_id] = (offsets[shard.skip:], lengths[shard.skip:])
    return self._index[shard_id]

  def __getitems__(self, indices) -> list[bytes]:
    """The serialized records at `indices` (ints in [0, len)), in order."""
    located = []
    for position, index in enumerate(indices):
      if not 0 <= index < len(self):
        raise IndexError(f'record {index} outside [0, {len(self)})')
      shard_id = bisect.bisect_right(self._starts, index) - 1
      located.append((shard_id, index - self._starts[shard_id], position))
    records = [b''] * len(located)
    # One open per shard and reads in file order: sequential where possible.
    located.sort()
    for shard_id, group in itertools.groupby(located, key=lambda x: x[0]):
      offsets, lengths = self._offsets(shard_id)
      with _open(self._shards[shard_id].path) as f:
        for _, local, position in group:
          f.seek(int(offsets[local]))
          records[position] = f.read(int(lengths[local]))
    return records

  def __getitem__(self, index: int) -> bytes:
    return self.__getitems__([index])[0]


def shards_of(file_instructions) -> list[Shard]:
  """Shards from tfds `FileInstruction`s (filename, skip, take)."""
  return [Shard(os.fspath(fi.filename), int(fi.skip), int(fi.take))
          for fi in file_instructions]
