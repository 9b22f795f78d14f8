"""What a mesh plan costs with, from a probe (plan.probe) or from the
cluster named by plan.* keys: pure functions of probe.json (its schema is
probe/run.py's docstring) and the config.

From a probe of the cluster:

- compute: its timed points of the model's gradient program with the
  parameters as their tree (tree_compute_s; a probe without it: the wire
  program's compute_s, which adds the copies of packing them in one
  vector), each with its FLOPs and its batch per device: the seconds a
  FLOP took at that batch. A candidate's program of other FLOPs (sharded,
  rematerialised) is timed at the rate of its own micro-batch per device
  (interpolated in log batch between the probe's batches, the nearest
  beyond them): a device's rate depends on the batch its operations
  work on (on 2 CPU cores a ViT's step of 4 images a device takes about
  twice the seconds a FLOP of one of 16: the probes of
  results/plan/mesh_check.jsonl), and a tensor-sharded step works on the
  larger batch of its fewer data shards;
  plus the optimiser's update (update.update_s, the whole model's on every
  device at once) times the share of the update a device computes: the
  share of the optimiser's state it holds, which FSDP and ZeRO-1 shard;
- links: inside a host, the intra_host all-reduce's fit (bus bandwidth,
  and its latency spread over the ring's 2(p-1) steps); across hosts, the
  inter_host one's (one device a host), else all_devices';
- each collective the probe timed in a program on a mesh's device groups
  (probe.json's mesh_collectives, when the probe measured them): that
  op on a group of that size and level costs what it cost there, in place
  of the ring model of the links above;
- what a step pays beyond its bytes (step_fixed_cost): fixed_cost_s once
  per step that communicates, and per_operand_s, the cost of each array of
  an all-reduce of p devices, spread over its 2(p-1) steps, at the level the
  probe's step crossed (across hosts when it spanned several).

From a probe of one host, for a cluster of more such hosts (plan.num_workers
a multiple of the host's devices): everything above from the probe, and the
NIC, which one host cannot measure, at plan.link_bandwidth_gbps and
plan.link_latency_ms; a collective across hosts pays the probe's cost per
array too (it is the library's, not the link's).

From plan.*: compute at plan.device_tflops x plan.device_utilization, the
configured links, nothing per array or per step.
"""

import bisect
import dataclasses
import math

from core import units
from core.errors import UsageError
from planner import from_probe
from planner import mesh_cost


@dataclasses.dataclass(frozen=True)
class Costing:
  links: mesh_cost.Links
  seconds_per_flop: float  # at every batch where `rates` is empty
  # ((per-device batch, seconds a FLOP), ...) by batch: a probe's.
  rates: tuple = ()
  update_s: float = 0.0  # the whole model's update on one device
  parameter_bytes: float = 0.0  # the whole model's (float32) parameters
  fixed_s: float = 0.0  # once per step that communicates
  source: str = 'plan.*'

  def update_share(self, params_bytes: float, opt_state_bytes: float,
                   opt_state_full: float) -> float:
    """The share of the model's update one device computes: of the
    optimiser's state, the share it holds (FSDP and ZeRO-1 shard the update
    with the state); for an optimiser without state, its share of the
    parameters."""
    if opt_state_full:
      return opt_state_bytes / opt_state_full
    return params_bytes / self.parameter_bytes if self.parameter_bytes else 0.0

  def flop_s(self, per_device_batch: float) -> float:
    """The seconds of a FLOP at `per_device_batch` images a device: the
    probe's rates interpolated linearly in log batch, the nearest batch's
    beyond them; without a probe, seconds_per_flop."""
    if not self.rates:
      return self.seconds_per_flop
    batches = [b for b, _ in self.rates]
    if per_device_batch <= batches[0]:
      return self.rates[0][1]
    if per_device_batch >= batches[-1]:
      return self.rates[-1][1]
    i = bisect.bisect_right(batches, per_device_batch)
    (b0, r0), (b1, r1) = self.rates[i - 1], self.rates[i]
    w = math.log(per_device_batch / b0) / math.log(b1 / b0)
    return r0 + w * (r1 - r0)

  def beyond_probed(self, per_device_batch: float) -> bool:
    """Whether `per_device_batch` lies outside the probe's timed batches,
    so that flop_s takes the nearest one's rate (plan.json says which
    configurations it costed so)."""
    return bool(self.rates) and not (self.rates[0][0] <= per_device_batch <= self.rates[-1][0])

  def compute_s(self, flops: float, update_share: float, per_device_batch: float) -> float:
    """A device's program of `flops` on micro-batches of `per_device_batch`
    images, and `update_share` of the update."""
    return flops * self.flop_s(per_device_batch) + self.update_s * update_share


def configured(plan) -> Costing:
  inf = float('inf')
  links = mesh_cost.Links(
      devices_per_host=plan.devices_per_host,
      intra_bytes_per_s=plan.intra_host_gbps * 1e9 / 8 if plan.intra_host_gbps else inf,
      intra_latency_s=plan.intra_host_latency_ms / 1e3,
      nic_bytes_per_s=plan.link_bandwidth_gbps * 1e9 / 8,
      nic_latency_s=plan.link_latency_ms / 1e3)
  rate = plan.device_tflops * 1e12 * plan.device_utilization
  # 0 TFLOP/s names no devices: run_mesh_plan refuses it; links alone are usable.
  return Costing(links=links, seconds_per_flop=1 / rate if rate else 0.0)


def cluster_devices(probe: dict) -> tuple[int, int]:
  """(devices, devices per host) of the probed cluster; UsageError when its
  hosts hold different numbers of devices (a mesh lies on equal hosts)."""
  per_host = set(probe['hosts']['devices_per_host'])
  if len(per_host) != 1:
    raise UsageError(f'plan.probe: the probed hosts hold {sorted(per_host)} devices; a mesh '
                     'plan needs hosts of equal size')
  return probe['provenance']['device_count'], per_host.pop()


def compute_rates(points: list[dict]) -> tuple:
  """((per-device batch, seconds a FLOP), ...) of the probe's compute
  points, by batch, timed as a tree where the probe did."""
  return tuple(sorted((q['per_device_batch'], q.get('tree_compute_s', q['compute_s']) / q['flops'])
                      for q in points))


def _ring(entry: dict) -> tuple[float, float]:
  """(bytes/s of a device's port, latency per ring step) of a level's
  all-reduce fit over its p participants."""
  fit = entry['all_reduce']
  p = entry['participants']
  rate = units.gbps_to_bytes_per_s(fit['busbw_gbps']) if fit['busbw_gbps'] else float('inf')
  return rate, fit['latency_s'] / (2 * (p - 1))


def from_probe_record(probe: dict) -> Costing:
  points = probe['compute']['points']
  if any('flops' not in q for q in points):
    raise UsageError('plan.probe: its compute points carry no FLOPs (an older probe); run '
                     '--mode=probe again')
  devices, per_host = cluster_devices(probe)
  levels = probe['collectives']
  measured = lambda level: levels.get(level, {}).get('measured')
  inf = float('inf')
  intra = _ring(levels['intra_host']) if measured('intra_host') else (inf, 0.0)
  across = next((_ring(levels[k]) for k in ('inter_host', 'all_devices')
                 if devices > per_host and measured(k)), (inf, 0.0))
  step = probe['step_fixed_cost']
  array_step_s = (step['per_operand_s'] / (2 * (step['participants'] - 1))
                  if step['participants'] > 1 else 0.0)
  spans_hosts = devices > per_host
  links = mesh_cost.Links(
      devices_per_host=per_host, intra_bytes_per_s=intra[0], intra_latency_s=intra[1],
      nic_bytes_per_s=across[0], nic_latency_s=across[1],
      intra_array_s=0.0 if spans_hosts else array_step_s,
      nic_array_s=array_step_s if spans_hosts else 0.0,
      measured=(probe.get('mesh_collectives') or {}).get('fits', {}))
  rates = compute_rates(points)
  return Costing(links=links, seconds_per_flop=rates[-1][1], rates=rates,
                 update_s=probe['update']['update_s'],
                 parameter_bytes=probe['model']['parameter_bytes'],
                 fixed_s=step['fixed_cost_s'], source='probe' + _timed(links))


def _timed(links: mesh_cost.Links) -> str:
  """What a plan's source adds when the probe timed collectives on mesh
  groups (plan.json's costed_from says which costing it got)."""
  return ', its collectives as timed on mesh groups' if links.measured else ''


def across_hosts(costing: Costing, plan) -> Costing:
  """A one-host probe's costing for a cluster of such hosts: the NIC at
  plan.link_bandwidth_gbps and plan.link_latency_ms, each array across hosts
  at the probe's cost per array (pure)."""
  # The probe's own groups lie inside its host: none of them crosses hosts.
  links = dataclasses.replace(
      costing.links, nic_bytes_per_s=plan.link_bandwidth_gbps * 1e9 / 8,
      nic_latency_s=plan.link_latency_ms / 1e3, nic_array_s=costing.links.intra_array_s)
  return dataclasses.replace(costing, links=links,
                             source='probe of one host, NIC from plan.*' + _timed(links))


def load(config, num_devices: int) -> tuple[dict, Costing]:
  """The probe of plan.probe, checked against the configured model, and its
  costing for `num_devices`: the probed cluster's, or more hosts like the
  one probed. UsageError (one line) for any other device count."""
  probe = from_probe.load(config.plan.probe)
  from_probe.check_same_model(probe, config)
  costing = from_probe_record(probe)
  devices, per_host = cluster_devices(probe)
  if devices == num_devices:
    return probe, costing
  if devices != per_host or num_devices % per_host:
    raise UsageError(f'plan.probe: the probe ran on {devices} devices in hosts of {per_host} '
                     f'and this plan is for {num_devices}; a mesh plan takes a probe of the '
                     'cluster or of one of its hosts (then a multiple of its devices)')
  if config.plan.devices_per_host not in (1, per_host):
    raise UsageError(f'plan.devices_per_host={config.plan.devices_per_host}: the probed host '
                     f'holds {per_host} devices; leave it unset or set it to {per_host}')
  return probe, across_hosts(costing, config.plan)


def check_timeable(probe: dict, num_devices: int, platform: str, process_count: int) -> None:
  """plan.time_steps times steps on this job's `num_devices` devices of
  `platform` in `process_count` processes: UsageError (one line) unless the
  probe measured those same devices, so that what is timed is the cluster
  the plan costed."""
  seen = probe['provenance']
  where = (f"{seen.get('device_count')} {seen.get('platform', '?')} device(s) in "
           f"{seen.get('process_count', 1)} process(es)")
  if (seen.get('process_count', 1) != process_count or seen.get('device_count') != num_devices
      or seen.get('platform') != platform):
    raise UsageError(f'plan.time_steps: the probe measured {where}, and this job has '
                     f'{num_devices} {platform} device(s) in {process_count} process(es); '
                     'time the steps on the devices the probe ran on, or leave '
                     'plan.time_steps 0')
