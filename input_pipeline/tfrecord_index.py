"""Random access to the records of TFRecord files, by an index of offsets.

tfds prepares data sets as TFRecord files by default, and TFRecord has no
index: tf.data can only stream it. A training order that is a pure function of
(seed, step) needs record i on demand, so each file's record offsets are found
once by hopping from header to header (12 bytes read per record, the payload
is skipped), which takes seconds for all of ImageNet. Array-record data sets
do not need this: they have random access of their own.
"""

import bisect
import dataclasses
import itertools
import os
import struct

import numpy as np

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
      offsets, lengths = scan_offsets(shard.path, shard.skip + shard.take)
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
