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

Each header's length is checked against its CRC. A corrupt header ends what
can be read of a file: nothing says where the next record starts. The records
before it are read as usual; it and every record after it read as empty,
which fails to parse and is counted as unreadable like any corrupt record,
and the file is named in one warning. The index of such a file is kept (and
stored) like any other, so the file is scanned once, not at every read.
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
# TFRecord's masked CRC-32C, from the TFRecord writer of tensorboard (a
# dependency already; pure Python, a few microseconds per 8-byte header).
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from core import atomic

SIDECAR_SUFFIX = '.offsets.npz'

# A record is: uint64 length, uint32 masked CRC-32C of the length, payload,
# uint32 masked CRC-32C of the payload.
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


@dataclasses.dataclass(frozen=True)
class Offsets:
  """Where the payloads of a file's first records are.

  `corrupt_at`: the first record whose header failed its CRC (it and the
  records after it read as empty), or -1 when every header was sound."""
  offsets: np.ndarray  # int64 [count]
  lengths: np.ndarray  # int64 [count]
  corrupt_at: int = -1


def scan_offsets(path: str, count: int) -> Offsets:
  """The payload offsets and lengths of the first `count` records of a file."""
  offsets = np.zeros(count, np.int64)
  lengths = np.zeros(count, np.int64)
  position, corrupt_at = 0, -1
  with _open(path) as f:
    for i in range(count):
      f.seek(position)
      header = f.read(_HEADER)
      if len(header) < _HEADER:
        # A truncated file: the missing records read as empty, which fails
        # to parse and is counted as unreadable, like any corrupt record.
        offsets[i:] = position
        break
      (length,), (length_crc,) = (struct.unpack('<Q', header[:8]),
                                  struct.unpack('<I', header[8:]))
      # A length past int64 could only pass its CRC by chance.
      if masked_crc32c(header[:8]) != length_crc or length >= 2**63:
        # Without a sound length there is no way to the next header.
        offsets[i:], corrupt_at = position, i
        break
      offsets[i], lengths[i] = position + _HEADER, length
      position += _HEADER + length + _FOOTER
  return Offsets(offsets, lengths, corrupt_at)


def _size(path: str) -> int:
  if '://' in path:
    from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.stat(path).length
  return os.path.getsize(path)


def _read_sidecar(path: str, size: int, count: int) -> Offsets | None:
  try:
    with _open(path + SIDECAR_SUFFIX) as f:
      saved = np.load(io.BytesIO(f.read()))
      # An index stored before headers were checked has no corrupt_at: the
      # KeyError makes it stale, and the file is scanned again.
      corrupt_at = int(saved['corrupt_at'])
      if int(saved['file_size']) == size and len(saved['offsets']) >= count:
        return Offsets(saved['offsets'][:count], saved['lengths'][:count],
                       corrupt_at if corrupt_at < count else -1)
  except (OSError, ValueError, KeyError):
    pass  # absent, unreadable or stale: scan
  except Exception as e:  # pylint: disable=broad-except
    if 'NotFound' not in type(e).__name__:  # tf.errors from remote file systems
      raise
  return None


def _write_sidecar(path: str, size: int, found: Offsets) -> None:
  """Writes the offsets beside the file, atomically (a temporary name, then
  a rename), so that processes writing at once leave one whole file."""
  buffer = io.BytesIO()
  np.savez(buffer, offsets=found.offsets, lengths=found.lengths,
           corrupt_at=np.int64(found.corrupt_at), file_size=np.int64(size))
  final = path + SIDECAR_SUFFIX
  try:
    if '://' in path:
      _write_remote(final, buffer.getvalue())
    else:
      atomic.write_bytes(final, buffer.getvalue())
  except Exception as e:  # pylint: disable=broad-except
    logging.log_first_n(logging.WARNING, 'Cannot store the record index beside '
                        '%s (%s); every run will scan it again', 1, path, e)


def _write_remote(final: str, data: bytes) -> None:
  """core.atomic's write, through TensorFlow's file layer (gs://, s3://)."""
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  temporary = f'{final}.tmp-{uuid.uuid4().hex}'
  try:
    with tf.io.gfile.GFile(temporary, 'wb') as f:
      f.write(data)
    tf.io.gfile.rename(temporary, final, overwrite=True)
  except BaseException:
    try:
      tf.io.gfile.remove(temporary)
    except Exception:  # pylint: disable=broad-except
      pass  # never created, or already renamed
    raise


def load_offsets(path: str, count: int) -> Offsets:
  """scan_offsets, through the stored index beside the file when there is one.

  A file with a corrupt header is named in a warning (once per process and
  file: the caller keeps the result)."""
  size = _size(path)
  found = _read_sidecar(path, size, count)
  if found is None:
    found = scan_offsets(path, count)
    _write_sidecar(path, size, found)
  if found.corrupt_at >= 0:
    logging.warning('%s: the header of record %d fails its CRC check; '
                    'records %d..%d of the file are unreadable', path,
                    found.corrupt_at, found.corrupt_at, count - 1)
  return found


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
      found = load_offsets(shard.path, shard.skip + shard.take)
      self._index[shard_id] = (found.offsets[shard.skip:],
                               found.lengths[shard.skip:])
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
