"""Ring all-reduce over emulated links: reduce-scatter, then all-gather.

The vector is cut into N segments. In each of the N-1 reduce-scatter steps
every worker sends one segment to the next worker on the ring and adds the
segment it receives from the previous one into its own; after them worker i
holds the complete sum of segment (i+1) mod N. In each of the N-1
all-gather steps every worker passes a complete segment on. Every worker's
interface sends and receives S/N bytes per step, at the same time (full
duplex), so a step takes S/(N*B) plus one latency and the whole all-reduce
2(N-1) of them: the bandwidth-optimal schedule the planner's formula
assumes (trainer/planner/formulas.py, ring_allreduce_s).
"""

import threading

import numpy as np

from trainer.engines.emulation import link


def segment_bounds(size: int, num_workers: int) -> list[tuple[int, int]]:
  """[start, end) of each of the N segments of a vector of `size` elements;
  they differ in length by at most one element."""
  edges = np.linspace(0, size, num_workers + 1).round().astype(int).tolist()
  return list(zip(edges, edges[1:]))


def reduce_scatter_segments(worker: int, step: int, num_workers: int) -> tuple[int, int]:
  """(segment worker sends, segment it receives and adds) at a reduce-scatter step."""
  return (worker - step) % num_workers, (worker - step - 1) % num_workers


def all_gather_segments(worker: int, step: int, num_workers: int) -> tuple[int, int]:
  """(segment worker sends, segment it receives) at an all-gather step."""
  return (worker + 1 - step) % num_workers, (worker - step) % num_workers


class Ring:
  """The shared buffers of one all-reduce: each worker's vector, its receive
  buffers, and a barrier that ends each ring step.

  Worker i's thread calls run(i). Received segments land in one of two
  buffers by step parity: a worker may send step s+1's segment before its
  neighbour has added step s's, never step s+2's (the barrier of step s+1
  lies between).
  """

  def __init__(self, vectors: list[np.ndarray], nics: list[link.Interface]):
    self.vectors, self.nics = vectors, nics
    self.n = len(vectors)
    self.bounds = segment_bounds(vectors[0].size, self.n)
    longest = max(end - start for start, end in self.bounds)
    self._received = [[np.empty(longest, vectors[0].dtype) for _ in range(2)]
                      for _ in range(self.n)]
    # One barrier per all-reduce: a failed worker breaks it (abort), and
    # every other worker's wait raises instead of hanging.
    self._barrier = threading.Barrier(self.n)

  def _segment(self, worker: int, index: int) -> np.ndarray:
    start, end = self.bounds[index]
    return self.vectors[worker][start:end]

  def run(self, i: int, prepare=None) -> None:
    """Worker i's part: on return, vectors[i] holds the sum of all vectors.

    prepare(), if given, runs first (the worker fills vectors[i]). Whatever
    it or the ring raises breaks the barrier, so that the other workers'
    waits raise BrokenBarrierError instead of waiting for ever.
    """
    n, right = self.n, (i + 1) % self.n
    try:
      if prepare is not None:
        prepare()
      for step in range(n - 1):
        send, add = reduce_scatter_segments(i, step, n)
        out = self._segment(i, send)
        link.transfer(self.nics[i], self.nics[right],
                      [(self._received[right][step % 2][:out.size], out)])
        self._barrier.wait()
        mine = self._segment(i, add)
        mine += self._received[i][step % 2][:mine.size]
      for step in range(n - 1):
        send, _ = all_gather_segments(i, step, n)
        # Straight into the neighbour's vector: the segment it receives is
        # one it neither sends nor reads in this step.
        link.transfer(self.nics[i], self.nics[right],
                      [(self._segment(right, send), self._segment(i, send))])
        self._barrier.wait()
    except BaseException:
      self._barrier.abort()
      raise
