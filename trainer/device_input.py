"""Host batches -> global device arrays, prepared ahead of the step."""

import collections
import time
from typing import Callable, Iterator

import jax
import numpy as np

from trainer import input_wait


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

  The host batches come through an input_wait.WaitedStream: `pipeline` names
  them in a stall's line, `stall_timeout_s` is data.stall_timeout_s (0: wait
  for ever), and `stop_requested` ends a wait with StopWhileWaiting. Once a
  batch is in flight, `fill` takes only the batches that are ready, so the
  step never waits for the host's batch after its own.
  """

  def __init__(self, host_batches: Iterator[dict], sharding, size: int = 2, *,
               pipeline: str = 'input pipeline', stall_timeout_s: float = 0.0,
               stop_requested: Callable[[], bool] | None = None):
    self._host = input_wait.WaitedStream(host_batches, pipeline, stall_timeout_s,
                                         stop_requested, ahead=max(size, 1))
    self._sharding = sharding
    self._queue = collections.deque()
    self._size = max(size, 1)
    self._exhausted = False
    self.wait_s = 0.0  # since the last pop_wait_s
    self.total_wait_s = 0.0  # since the start

  def fill(self) -> None:
    """Starts copies until `size` batches are in flight (or the stream ends)."""
    while len(self._queue) < self._size and not self._exhausted:
      if self._queue and not self._host.ready():
        return  # a batch is in flight: the step need not wait for this one
      start = time.perf_counter()
      batch = next(self._host, None)
      waited = time.perf_counter() - start
      self.wait_s += waited
      self.total_wait_s += waited
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
