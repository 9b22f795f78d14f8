"""Which server shard owns which part of every variable.

A piece is a contiguous block of rows (along axis 0) of one variable, or the
whole of a scalar. Every element of every variable belongs to exactly one
piece and every piece to exactly one shard.

  greedy       balances bytes: variables larger than an eighth of a shard's
               fair share are cut along axis 0 (as TensorFlow's
               min_max_variable_partitioner and BytePS cut large tensors), then
               pieces go, largest first, to the least-loaded shard.
  round_robin  whole variables, shard 0, 1, 2, ... in turn, in the model's
               order (TensorFlow's replica_device_setter).
"""

import dataclasses
import math

from core.errors import UsageError

PARTITIONERS = ('greedy', 'round_robin')
# Greedy cuts variables into pieces of at most this share of a shard's fair
# share of the bytes, so that largest-first placement lands within a few
# percent of balance.
_PIECES_PER_FAIR_SHARE = 8


@dataclasses.dataclass(frozen=True)
class Piece:
  path: str  # the variable: 'params/stage1_block1/Conv_0/kernel'
  start: int  # first row (axis 0); 0 for a scalar
  stop: int  # one past the last row; 1 for a scalar
  shape: tuple  # the piece's own shape
  itemsize: int

  @property
  def key(self) -> str:
    return f'{self.path}[{self.start}:{self.stop}]'

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.itemsize

  def of(self, array):
    """This piece's rows of the whole variable `array` (a view)."""
    return array[self.start:self.stop] if self.shape else array


def _cut(path: str, shape: tuple, itemsize: int, max_bytes: float) -> list[Piece]:
  if not shape or shape[0] <= 1:
    return [Piece(path, 0, shape[0] if shape else 1, tuple(shape), itemsize)]
  row_bytes = math.prod(shape[1:]) * itemsize
  count = min(shape[0], max(1, math.ceil(shape[0] * row_bytes / max_bytes)))
  bounds = [round(i * shape[0] / count) for i in range(count + 1)]
  return [Piece(path, a, b, (b - a, *shape[1:]), itemsize)
          for a, b in zip(bounds, bounds[1:])]


def partition(variables: dict, num_shards: int, partitioner: str) -> list[list[Piece]]:
  """Pieces of each shard; `variables` maps path -> object with shape, dtype.

  Raises UsageError when some shard would own nothing.
  """
  if partitioner not in PARTITIONERS:
    raise UsageError(f'ps.partitioner={partitioner!r}; use one of {PARTITIONERS}')
  # A shard owns at least one variable (round_robin) or one row of one
  # (greedy): more shards than that can never all be filled. Said before
  # anything is allocated per shard (a billion shards would take all memory).
  most = (len(variables) if partitioner == 'round_robin' else
          sum(v.shape[0] if v.shape else 1 for v in variables.values()))
  if num_shards > most:
    unit = 'variables' if partitioner == 'round_robin' else 'rows of variables'
    raise UsageError(f'ps.num_shards={num_shards}: this model has {most} {unit}, '
                     f'which cannot fill {num_shards} shards ({partitioner} '
                     f'partitioner); use at most {most} shards')
  shards = [[] for _ in range(num_shards)]
  if partitioner == 'round_robin':
    for i, (path, v) in enumerate(variables.items()):
      shards[i % num_shards].extend(
          _cut(path, tuple(v.shape), v.dtype.itemsize, math.inf))
    unit = 'variables'
  else:
    total = sum(math.prod(v.shape) * v.dtype.itemsize for v in variables.values())
    max_bytes = total / num_shards / _PIECES_PER_FAIR_SHARE
    pieces = [p for path, v in variables.items()
              for p in _cut(path, tuple(v.shape), v.dtype.itemsize, max_bytes)]
    loads = [0] * num_shards
    # Largest first; ties keep the model's order, so placement is reproducible.
    for piece in sorted(pieces, key=lambda p: -p.nbytes):
      j = loads.index(min(loads))
      shards[j].append(piece)
      loads[j] += piece.nbytes
    unit = 'pieces'
  empty = sum(1 for s in shards if not s)
  if empty:
    have = num_shards - empty
    raise UsageError(f'ps.num_shards={num_shards}: the {partitioner} partitioner '
                     f'fills only {have} shards with this model\'s {unit}; use '
                     f'at most {have} shards')
  return shards


def shard_bytes(shards: list[list[Piece]]) -> list[int]:
  return [sum(p.nbytes for p in s) for s in shards]
