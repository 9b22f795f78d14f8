"""The cost model of a data-parallel step on hosts of several devices.

A cluster is H hosts of G devices each, N = H*G workers. A host's devices
share one NIC (bandwidth B per direction, full duplex, one-way latency);
inside a host each device has its own port into the host's fabric (NVLink,
PCIe) at the intra-host bandwidth. Bandwidths are bytes/s, math.inf for an
unlimited link. With G = 1 every worker has a NIC of its own: the flat
cluster of formulas.py, whose functions these reduce to exactly.

The all-reduce and the dedicated-server PS are what the emulator does
(trainer/engines/emulation/topology.py, trainer/engines/allreduce/ring.py,
trainer/engines/ps/cluster.py), so the study can check them against it.
Co-located servers are a model of their own (ps_direction_s).

A host's CPU cores are a resource too: its input pipeline decodes its G
devices' images beside the step (prefetching), at a CPU cost per image, so
a step takes at least the time C cores need for G*b images
(host_input_s); a cluster whose devices outrun that is input-bound.
"""

import collections
import dataclasses
import math
import typing

from configs import values
from planner import formulas
from trainer.engines import allreduce

ALLREDUCE_ALGORITHMS = allreduce.ALGORITHMS  # the engine's own
PS_PLACEMENTS = values.PS_PLACEMENTS
STRATEGIES = ALLREDUCE_ALGORITHMS + ('ps',)
# The share of T_C that communication can overlap when a framework sends
# each layer's gradient as backprop produces it: the backward pass. By FLOPs
# it is about twice the forward (a gradient for the layer's input and one
# for its weights, each a forward's worth), so 2/3 of the step: the FLOP
# split, the default where nothing better is known (plan.backprop_share; a
# publication's own timing replaces it, benchmarks/published_clusters).
BACKPROP_SHARE = 2 / 3
# The resources a step's time goes to, as the plan names them.
RESOURCES = {
    'compute': 'compute',
    'nic': "the hosts' NICs",
    'intra_host': 'the intra-host link',
    'server_nic': "the servers' NICs",
    'servers_update': "the servers' update",
    'host_cpu': "the hosts' CPU cores (input decoding)",
}


@dataclasses.dataclass(frozen=True)
class Cluster:
  num_hosts: int  # H
  devices_per_host: int = 1  # G
  nic_bandwidth: float = math.inf  # bytes/s per direction
  nic_latency_s: float = 0.0
  intra_bandwidth: float = math.inf  # each device's port inside its host
  intra_latency_s: float = 0.0
  host_cores: int = 0  # C: a host's cores for its input pipeline; 0: not counted
  host_cpu_s_per_image: float = 0.0  # CPU seconds to decode and augment an image

  @property
  def num_workers(self) -> int:
    return self.num_hosts * self.devices_per_host

  def with_hosts(self, num_hosts: int) -> 'Cluster':
    return dataclasses.replace(self, num_hosts=num_hosts)


def _over(nbytes: float, bandwidth: float) -> float:
  """Seconds to carry `nbytes` at `bandwidth` (nothing, or an unlimited
  link, takes none)."""
  return nbytes / bandwidth if nbytes > 0 else 0.0


class Phase(typing.NamedTuple):
  """Ring steps alike: how many, the bytes each member sends in one, the
  seconds one takes, and the resource that sets them."""
  steps: int
  message_bytes: float
  step_s: float
  resource: str


def allreduce_phases(model_bytes: float, c: Cluster, algorithm: str) -> list[Phase]:
  """The ring steps of an all-reduce over the cluster's hosts, as the
  all-reduce engine runs them (trainer/engines/allreduce/ring.py).

  ring: one ring through all N workers, in worker order: 2(N-1) steps in
  which every worker sends S/N to the next. Only the H edges between hosts
  cross NICs, one stream each way per NIC; the others cross two ports; a
  step ends with its slowest edge.
  hierarchical: a reduce-scatter inside each host (G-1 steps of S/G over
  the ports), then G rings across the hosts, each sending S/(G*H) per step,
  all through the host's NIC, which carries S/H per step each way (2(H-1)
  steps), then an all-gather inside each host (G-1 steps of S/G).
  """
  n, g, h = c.num_workers, c.devices_per_host, c.num_hosts
  if n <= 1:
    return []
  if algorithm == 'ring':
    message = model_bytes / n
    edges = {}
    if g > 1:
      edges['intra_host'] = _over(message, c.intra_bandwidth) + c.intra_latency_s
    if h > 1:
      edges['nic'] = _over(message, c.nic_bandwidth) + c.nic_latency_s
    slowest = max(edges, key=edges.get)
    return [Phase(2 * (n - 1), message, edges[slowest], slowest)]
  if algorithm != 'hierarchical':
    raise ValueError(f'unknown all-reduce algorithm {algorithm!r}')
  inside = Phase(g - 1, model_bytes / g,
                 _over(model_bytes / g, c.intra_bandwidth) + c.intra_latency_s, 'intra_host')
  phases = [inside] if g > 1 else []
  if h > 1:
    message = model_bytes / (g * h)
    phases.append(Phase(2 * (h - 1), message,
                        _over(g * message, c.nic_bandwidth) + c.nic_latency_s, 'nic'))
  return phases + ([inside] if g > 1 else [])


def _parts(phases: list[Phase]) -> dict:
  """{resource: seconds} of the phases (a resource's phases take the same
  seconds a step)."""
  steps = collections.Counter()
  for p in phases:
    steps[p.resource] += p.steps
  return {p.resource: steps[p.resource] * p.step_s for p in phases}


def ring_allreduce_parts(model_bytes: float, c: Cluster) -> dict:
  """One ring through all N workers (allreduce_phases): {resource: seconds},
  2(N-1) * max(S/(N*B_nic) + lat_nic, S/(N*B_intra) + lat_intra)."""
  if c.num_workers > 1 and c.devices_per_host == 1:
    # The flat ring of formulas.py, to the bit.
    return {'nic': formulas.ring_allreduce_s(model_bytes, c.nic_bandwidth,
                                             c.num_workers, c.nic_latency_s)}
  return _parts(allreduce_phases(model_bytes, c, 'ring'))


def hierarchical_allreduce_parts(model_bytes: float, c: Cluster) -> dict:
  """Inside each host, across the hosts, inside again (allreduce_phases):
  {resource: seconds}, 2(G-1) * (S/(G*B_intra) + lat_intra) on the ports
  and 2(H-1) * (S/(H*B_nic) + lat_nic) on the NICs. Hosts of one device
  make it the flat ring."""
  if c.devices_per_host == 1:
    return ring_allreduce_parts(model_bytes, c)
  return _parts(allreduce_phases(model_bytes, c, 'hierarchical'))


def allreduce_s(model_bytes: float, c: Cluster, algorithm: str) -> float:
  """The all-reduce's seconds by `algorithm` (ring or hierarchical)."""
  return sum(allreduce_parts(model_bytes, c, algorithm).values())


def allreduce_parts(model_bytes: float, c: Cluster, algorithm: str) -> dict:
  if algorithm == 'ring':
    return ring_allreduce_parts(model_bytes, c)
  if algorithm == 'hierarchical':
    return hierarchical_allreduce_parts(model_bytes, c)
  raise ValueError(f'unknown all-reduce algorithm {algorithm!r}')


def ps_direction_parts(model_bytes: float, c: Cluster, num_shards: int,
                       placement: str = 'dedicated',
                       largest_shard_bytes: float | None = None) -> dict:
  """One direction (push or pull) of a PS step: {resource: seconds}; the
  direction takes the largest of them.

  dedicated: each shard on a server host of its own, with a NIC like the
  workers' hosts'. A host's NIC carries its G workers' S each, G*S; the
  busiest server's NIC carries N*S_shard (S_shard = S/N_ps, or the largest
  shard): max(G*S, N*S_shard)/B_nic + lat_nic. The emulator's PS.

  colocated: shard j on host j mod H, so a host holds k = floor(N_ps/H) or
  ceil(N_ps/H) shards, k*S_shard of the model. A worker's bytes for its own
  host's shards cross its port (k*S_shard/B_intra); the rest cross the
  NICs. Pushing, a host's NIC sends its G workers' bytes for other hosts,
  G*(S - k*S_shard), and receives the other N-G workers' bytes for its own
  shards, (N-G)*k*S_shard (full duplex: the larger of the two counts); the
  pull is the same with the roles swapped. The host with the fewest shards
  sends the most, the one with the most receives the most. The shards'
  side of a host's own traffic (host memory) is not a limit here.
  """
  shard = model_bytes / num_shards if largest_shard_bytes is None else largest_shard_bytes
  n, g, h = c.num_workers, c.devices_per_host, c.num_hosts
  if placement == 'dedicated':
    host, server = g * model_bytes, n * shard
    busiest = 'nic' if host >= server else 'server_nic'
    if g == 1:  # the flat PS of formulas.py, to the bit
      return {busiest: formulas.ps_direction_s(model_bytes, c.nic_bandwidth, n, num_shards,
                                               c.nic_latency_s, largest_shard_bytes)}
    return {busiest: _over(max(host, server), c.nic_bandwidth) + c.nic_latency_s}
  if placement != 'colocated':
    raise ValueError(f'unknown PS placement {placement!r}')
  def held(k: int) -> float:  # the model's bytes on a host of k shards
    return model_bytes if k >= num_shards else min(model_bytes, k * shard)
  fewest, most = num_shards // h, -(-num_shards // h)
  sends = g * (model_bytes - held(fewest))
  receives = (n - g) * held(most)
  parts = {}
  if max(sends, receives) > 0:
    parts['nic'] = _over(max(sends, receives), c.nic_bandwidth) + c.nic_latency_s
  if most > 0:  # a worker's bytes for its own host's shards
    parts['intra_host'] = _over(held(most), c.intra_bandwidth) + c.intra_latency_s
  return parts


def ps_host_bytes(model_bytes: float, c: Cluster, placement: str = 'dedicated') -> float:
  """The bytes a host's NIC carries each way with one shard a host, the
  fewest any shard count gets it to: G*S (dedicated), G*S*(H-1)/H
  (colocated). More than B*T_C of them and no shard count hides PS."""
  g, h = c.devices_per_host, c.num_hosts
  return g * model_bytes if placement == 'dedicated' else g * model_bytes * (h - 1) / h


def ps_direction_s(model_bytes: float, c: Cluster, num_shards: int,
                   placement: str = 'dedicated',
                   largest_shard_bytes: float | None = None) -> float:
  parts = ps_direction_parts(model_bytes, c, num_shards, placement, largest_shard_bytes)
  return max(parts.values(), default=0.0)


def _overlapped(compute_s: float, comm_s: float, share: float) -> float:
  """T_C with `comm_s` hidden behind its last `share`:
  (1 - share)*T_C + max(share*T_C, comm); share 1 is max(T_C, comm)."""
  return (1 - share) * compute_s + max(share * compute_s, comm_s)


def host_input_s(c: Cluster, per_device_batch: int) -> float:
  """Seconds a host's C cores take to decode one step's images for its G
  devices, G*b*cpu_s/C (0 when the cores are not counted)."""
  if not c.host_cores or per_device_batch <= 0:
    return 0.0
  return (c.devices_per_host * per_device_batch * c.host_cpu_s_per_image
          / c.host_cores)


def step_parts(strategy: str, compute_s: float, model_bytes: float, c: Cluster, *,
               num_shards: int = 1, placement: str = 'dedicated', update_s: float = 0.0,
               overlap: bool = False, overlap_share: float = 1.0,
               input_s: float = 0.0) -> tuple[float, dict]:
  """(step seconds, {resource: seconds of the step that went to it}).

  All-reduce: T_C then the all-reduce; with overlap the all-reduce hides
  behind the last `overlap_share` of T_C (1: all of it, as formulas.py;
  the backward pass's share, BACKPROP_SHARE by FLOPs). PS: T_C, push, the servers' update
  (update_s: all shards together), pull; with overlap the push hides so
  (formulas.ps_step_s). The input pipeline runs beside all of it: the step
  takes max(that, input_s) (host_input_s); 'host_cpu', input_s, is among
  the parts only when it sets the step (the cores are busy all of it).
  """
  step, parts = _device_step_parts(strategy, compute_s, model_bytes, c,
                                   num_shards=num_shards, placement=placement,
                                   update_s=update_s, overlap=overlap,
                                   overlap_share=overlap_share)
  if input_s > step:
    return input_s, {**parts, 'host_cpu': input_s}
  return step, parts


def _device_step_parts(strategy: str, compute_s: float, model_bytes: float, c: Cluster, *,
                       num_shards: int, placement: str, update_s: float,
                       overlap: bool, overlap_share: float) -> tuple[float, dict]:
  """step_parts without the input pipeline."""
  if strategy in ALLREDUCE_ALGORITHMS:
    comm = allreduce_parts(model_bytes, c, strategy)
    total = sum(comm.values())
    step = _overlapped(compute_s, total, overlap_share) if overlap else compute_s + total
    return step, {'compute': compute_s, **comm}
  if strategy != 'ps':
    raise ValueError(f'unknown strategy {strategy!r}')
  direction = ps_direction_parts(model_bytes, c, num_shards, placement)
  one_way = max(direction.values(), default=0.0)
  step = (_overlapped(compute_s, one_way, overlap_share) if overlap else
          compute_s + one_way) + update_s + one_way
  parts = {'compute': compute_s, 'servers_update': update_s}
  if direction:
    busiest = max(direction, key=direction.get)
    parts[busiest] = parts.get(busiest, 0.0) + 2 * one_way
  return step, parts


def step_s(strategy: str, compute_s: float, model_bytes: float, c: Cluster, **kw) -> float:
  return step_parts(strategy, compute_s, model_bytes, c, **kw)[0]


def efficiency(compute_s: float, step_seconds: float) -> float:
  """Scaling efficiency: the throughput against N devices that only compute,
  T_C / step."""
  return compute_s / step_seconds if step_seconds > 0 else 1.0


def limiting_resource(parts: dict) -> str:
  """The resource that takes the most of a step's time (compute, when the
  communication takes less)."""
  return max(parts, key=parts.get)


def min_ps_shards(model_bytes: float, c: Cluster, compute_s: float,
                  placement: str = 'dedicated') -> int:
  """The fewest shards whose busiest NIC carries a direction's bytes within
  T_C (latency aside, as formulas.min_ps_shards), at most H: beyond one
  shard per host no link gets less to carry. When none does, the shard
  count that makes the direction shortest.

  Dedicated with G = 1: formulas.min_ps_shards, the flat lemma, exactly.
  """
  h = c.num_hosts
  if placement == 'dedicated':
    if c.devices_per_host == 1:
      return formulas.min_ps_shards(model_bytes, c.nic_bandwidth, c.num_workers, compute_s)
    if math.isinf(c.nic_bandwidth):
      return 1
    needed = math.ceil(c.num_workers * model_bytes / (c.nic_bandwidth * compute_s))
    return max(1, min(needed, h))
  bare = dataclasses.replace(c, nic_latency_s=0.0, intra_latency_s=0.0)
  times = {n_ps: ps_direction_s(model_bytes, bare, n_ps, placement)
           for n_ps in range(1, h + 1)}
  fitting = [n_ps for n_ps, t in times.items() if t <= compute_s]
  return fitting[0] if fitting else min(times, key=lambda n_ps: (times[n_ps], n_ps))


def max_scaling_hosts(efficiency_at, threshold: float = 0.8,
                      limit: int = 4096) -> int | None:
  """The largest H such that every cluster of 1..H hosts reaches
  `threshold` (efficiency_at(H) -> efficiency); 0 when not even one host
  does; None when all up to `limit` hosts do (no limit in sight)."""
  for hosts in range(1, limit + 1):
    if efficiency_at(hosts) < threshold:
      return hosts - 1
  return None
