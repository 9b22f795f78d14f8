"""Host batches -> global device arrays, prepared ahead of the step."""

import collections
import time
from typing import Iterator

import jax
import numpy as np


def to_global(batch: dict[str, np.ndarray], sharding) -> dict[str, jax.Array]:
  """One global array per key from this process's share of the batch."""
  return {k: jax.make_array_from_process_local_data(sharding, v)
          for k, v in batch.items()}


class DevicePrefetcher:
  """Keeps `size` batches in flight to the devices while the step runs.

  The host-to-device copy is asynchronous, so starting it a step early hides
  it behind compute. `wait_s` accumulates the time the loop spent waiting for
  the host pipeline, the figure that says whether input is the bottleneck.
  A finite stream (evaluation) ends after its last batch.
  """

  def __init__(self, host_batches: Iterator[dict], sharding, size: int = 2):
    self._host = host_batches
    self._sharding = sharding
    self._queue = collections.deque()
    self._size = max(size, 1)
    self._exhausted = False
    self.wait_s = 0.0

  def fill(self) -> None:
    """Starts copies until `size` batches are in flight (or the stream ends)."""
    while len(self._queue) < self._size and not self._exhausted:
      start = time.perf_counter()
      batch = next(self._host, None)
      self.wait_s += time.perf_counter() - start
      if batch is None:
        self._exhausted = True
      else:
        self._queue.append(to_global(batch, self._sharding))

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, jax.Array]:
    self.fill()
    if not self._queue:
      raise StopIteration
    return self._queue.popleft()

  def pop_wait_s(self) -> float:
    wait, self.wait_s = self.wait_s, 0.0
    return wait
