"""All-reduce over emulated links: a flat ring, or hierarchical over hosts.

A ring of n members cuts the vector into n segments. In each of the n-1
reduce-scatter steps every member sends one segment to the next member and
adds the segment it receives from the previous one into its own; after them
member p holds the complete sum of segment (p+1) mod n. In each of the n-1
all-gather steps every member passes a complete segment on. Every member's
interface sends and receives S/n bytes per step, at the same time (full
duplex), so a step takes S/(n*B) plus one latency and the whole all-reduce
2(n-1) of them: the bandwidth-optimal schedule the planner's formula
assumes (planner/formulas.py, ring_allreduce_s).

`flat`: one ring through every worker, in worker order, so a host's
workers are neighbours and only the edges between hosts cross NICs.
`hierarchical`: a reduce-scatter inside each host, then G rings across the
hosts, ring k joining the k-th workers of every host on the segment they
hold (all G share their host's NIC), then an all-gather inside each host:
each host's NIC carries 2(H-1)/H of the vector, where a flat ring's
carries 2(N-1)/N, and in 2(H-1) steps instead of 2(N-1).
"""

import threading

import numpy as np

from trainer.engines.emulation import link


def segment_bounds(size: int, num_members: int) -> list[tuple[int, int]]:
  """[start, end) of each of the n segments of a vector of `size` elements;
  they differ in length by at most one element."""
  edges = np.linspace(0, size, num_members + 1).round().astype(int).tolist()
  return list(zip(edges, edges[1:]))


def reduce_scatter_segments(member: int, step: int, n: int) -> tuple[int, int]:
  """(segment the member sends, segment it receives and adds) at a step."""
  return (member - step) % n, (member - step - 1) % n


def all_gather_segments(member: int, step: int, n: int) -> tuple[int, int]:
  """(segment the member sends, segment it receives) at an all-gather step."""
  return (member + 1 - step) % n, (member - step) % n


class Ring:
  """One ring: its members' vectors (views), receive buffers, and a barrier
  that ends each ring step.

  edges[p] is the (sender's, receiver's) interface from member p to member
  p+1. Received segments land in one of two buffers by step parity: a
  member may send step s+1's segment before its neighbour has added step
  s's, never step s+2's (the barrier of step s+1 lies between).
  """

  def __init__(self, vectors: list[np.ndarray], edges: list[tuple]):
    self.vectors, self.edges = vectors, edges
    self.n = len(vectors)
    self.bounds = segment_bounds(vectors[0].size, self.n)
    longest = max(end - start for start, end in self.bounds)
    self._received = [[np.empty(longest, vectors[0].dtype) for _ in range(2)]
                      for _ in range(self.n)]
    self._barrier = threading.Barrier(self.n)

  def segment(self, member: int, index: int) -> np.ndarray:
    start, end = self.bounds[index % self.n]
    return self.vectors[member][start:end]

  def reduce_scatter(self, p: int) -> None:
    n, right = self.n, (p + 1) % self.n
    for step in range(n - 1):
      send, add = reduce_scatter_segments(p, step, n)
      out = self.segment(p, send)
      link.transfer(*self.edges[p], [(self._received[right][step % 2][:out.size], out)])
      self._barrier.wait()
      mine = self.segment(p, add)
      mine += self._received[p][step % 2][:mine.size]

  def all_gather(self, p: int) -> None:
    n, right = self.n, (p + 1) % self.n
    for step in range(n - 1):
      send, _ = all_gather_segments(p, step, n)
      # Straight into the neighbour's vector: the segment it receives is
      # one it neither sends nor reads in this step.
      link.transfer(*self.edges[p], [(self.segment(right, send), self.segment(p, send))])
      self._barrier.wait()

  def abort(self) -> None:
    self._barrier.abort()


class AllReduce:
  """The rings of one algorithm over every worker's vector.

  Worker i's thread calls run(i); on return vectors[i] holds the sum of
  all vectors. Whatever a worker raises breaks every ring, so that the
  other workers' waits raise BrokenBarrierError instead of waiting for ever.
  """

  def __init__(self, algorithm: str, vectors: list[np.ndarray], topology):
    self._topology = t = topology
    route = lambda members: [t.route(a, b) for a, b in zip(members, members[1:] + members[:1])]
    if algorithm == 'ring':
      workers = list(range(t.num_workers))
      self._rings = [Ring(vectors, route(workers))]
      self._plan = [(('all', 0, p),) for p in workers]
      return
    if algorithm != 'hierarchical':
      raise ValueError(f'unknown all-reduce algorithm {algorithm!r}')
    g = t.devices_per_host
    host_rings = []
    for h in range(t.num_hosts):
      members = t.workers_of(h)
      host_rings.append(Ring([vectors[i] for i in members], route(members)))
    # After a host's reduce-scatter, its k-th worker holds the host's sum of
    # segment (k+1) mod G: ring k joins those segments across the hosts.
    bounds = segment_bounds(vectors[0].size, g)
    cross_rings = []
    for k in range(g):
      start, end = bounds[(k + 1) % g]
      members = [h * g + k for h in range(t.num_hosts)]
      cross_rings.append(Ring([vectors[i][start:end] for i in members], route(members)))
    self._rings = host_rings + cross_rings
    self._plan = []
    for i in range(t.num_workers):
      h, k = t.host_of(i), i % g
      self._plan.append((('reduce_scatter', h, k), ('all', t.num_hosts + k, h),
                         ('all_gather', h, k)))

  def run(self, i: int, prepare=None) -> None:
    """Worker i's part. prepare(), if given, runs first (it fills vectors[i])."""
    try:
      if prepare is not None:
        prepare()
      for phase, ring, member in self._plan[i]:
        if phase in ('reduce_scatter', 'all'):
          self._rings[ring].reduce_scatter(member)
        if phase in ('all_gather', 'all'):
          self._rings[ring].all_gather(member)
    except BaseException:
      for ring in self._rings:
        ring.abort()
      raise
