"""Which examples a process reads at a step: pure numpy arithmetic, no I/O.

The training stream is the concatenation of epochs, each a permutation that
depends only on (seed, epoch). The global batch at step s is the stream
positions [s*B, (s+1)*B); process p of P reads the p-th contiguous slice of
B/P of them. Everything here is a pure function of its arguments, which is
what makes a resumed run see exactly the batches of an uninterrupted one.
"""

import numpy as np


def local_batch_size(batch_size: int, process_count: int) -> int:
  """The per-process share of a global batch; ValueError if it is not whole."""
  if batch_size <= 0:
    raise ValueError(f'batch size must be positive, got {batch_size}')
  if process_count <= 0:
    raise ValueError(f'process_count must be positive, got {process_count}')
  if batch_size % process_count:
    raise ValueError(
        f'batch size {batch_size} is not divisible by the {process_count} '
        'processes')
  return batch_size // process_count


def check_process_index(process_index: int, process_count: int) -> None:
  if not 0 <= process_index < process_count:
    raise ValueError(
        f'process_index {process_index} is outside [0, {process_count})')


def train_positions(step: int, batch_size: int, process_index: int,
                    process_count: int) -> np.ndarray:
  """Stream positions of this process's share of the global batch at `step`."""
  local = local_batch_size(batch_size, process_count)
  start = step * batch_size + process_index * local
  return np.arange(start, start + local, dtype=np.int64)


class TrainOrder:
  """Maps stream positions to example indices, one permutation per epoch.

  The only state is a cache of the last permutation, so that a batch costs a
  gather rather than a fresh shuffle of the whole data set. The cache is one
  (epoch, permutation) tuple, replaced whole, so threads may share an order.
  """

  def __init__(self, num_examples: int, seed: int):
    if num_examples <= 0:
      raise ValueError(f'num_examples must be positive, got {num_examples}')
    self.num_examples = num_examples
    self.seed = seed
    self._cache = (-1, np.empty(0, np.int64))

  def permutation(self, epoch: int) -> np.ndarray:
    """The order of the examples in `epoch`, a function of (seed, epoch)."""
    cached_epoch, perm = self._cache
    if epoch != cached_epoch:
      rng = np.random.default_rng([self.seed, epoch])
      perm = rng.permutation(self.num_examples).astype(np.int64)
      self._cache = (epoch, perm)
    return perm

  def example_indices(self, positions: np.ndarray) -> np.ndarray:
    """Example index at each stream position (a batch may straddle epochs)."""
    epochs, offsets = np.divmod(positions, self.num_examples)
    indices = np.empty_like(positions)
    for epoch in np.unique(epochs):
      here = epochs == epoch
      indices[here] = self.permutation(int(epoch))[offsets[here]]
    return indices


def num_eval_batches(num_examples: int, eval_batch_size: int) -> int:
  """Global eval batches needed to see every example once (the last padded)."""
  return -(-num_examples // eval_batch_size)


def eval_indices(num_examples: int, eval_batch_size: int, process_index: int,
                 process_count: int) -> tuple[np.ndarray, np.ndarray]:
  """Example indices and validity mask of this process's eval batches.

  Global batch j holds examples [j*B, (j+1)*B), padded past the end; process
  p takes the p-th contiguous slice of each. Every process gets the same
  number of batches, because SPMD steps need all processes to take part.
  Padding points at example 0 (any real example decodes fine) and is masked.

  Returns:
    (indices, mask), both [num_eval_batches, eval_batch_size / process_count].
  """
  check_process_index(process_index, process_count)
  local = local_batch_size(eval_batch_size, process_count)
  num_batches = num_eval_batches(num_examples, eval_batch_size)
  starts = np.arange(num_batches, dtype=np.int64)[:, None] * eval_batch_size
  positions = starts + process_index * local + np.arange(local)[None, :]
  mask = positions < num_examples
  return np.where(mask, positions, 0), mask
