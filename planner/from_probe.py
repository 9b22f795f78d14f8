"""Planning from a probe (plan.probe): SPMD data parallelism on the cluster
the probe ran on, and on more hosts of the same kind, predicted from what
it measured there (probe.json, written by --mode=probe; its schema is
probe/run.py's docstring).

A step over n devices at per-device batch b takes

  T(b, n) = T_C(b) + T_update + T_fixed + k * c(n) + bytes * (2(n-1)/n) / busbw

- T_C(b): the model's gradients at b, every device at once, with the
  parameters as their tree, as the SPMD step holds them
  (compute.points' tree_compute_s; a probe without it: compute_s, the
  parameter-server workers' program, which also packs them in one vector);
- T_update: the optimiser's update (update.update_s);
- T_fixed and c(p): what a step pays whatever it moves, and per array of
  its all-reduce (step_fixed_cost: fixed_cost_s and per_operand_s, fitted
  to a tiny model's data-parallel steps of several array counts, each less
  its step on one device: probe/step_cost.py); where the probe also timed
  steps of equal arrays of larger sizes (by_array_bytes), each array costs
  c at its size, interpolated in log size, less its bytes at busbw, and
  k * c(n) is the sum over the step's arrays (array_cost_points);
- k, bytes: the arrays the model's compiled SPMD step moves in its
  collectives, and their bytes (step_program: operands, bytes,
  arrays_by_bytes): the gradients (XLA combines them into few collectives,
  whose arrays a library such as gloo still moves one by one) and batch
  norm's statistics;
- busbw: the bus bandwidth of the all-reduce fit over all the probe's p
  devices (collectives.all_devices, or inter_host with one device a host;
  with one host, intra_host), which a ring's 2(n-1)/n share of the bytes
  moves at.
For n devices other than p, a ring's steps scale the per-array cost:
c(n) = c(p) * (n-1)/(p-1). At n = p, every figure is the probe's own.
Nothing here reads a training run's times.
"""

import dataclasses
import json
import math
import os

from core import units
from core.errors import UsageError

PROBE_FILE = 'probe.json'
SCHEMA_VERSION = 2


def load(directory: str) -> dict:
  """The probe.json in `directory`; UsageError (one line) when it is
  missing, unreadable or of another schema."""
  path = os.path.join(directory, PROBE_FILE)
  try:
    with open(path) as f:
      probe = json.load(f)
  except FileNotFoundError:
    raise UsageError(f'plan.probe={directory!r}: no {PROBE_FILE} there; run '
                     '--mode=probe with that work dir first') from None
  except (OSError, ValueError) as e:
    raise UsageError(f'plan.probe={directory!r}: {PROBE_FILE} cannot be read ({e})') from None
  if not isinstance(probe, dict) or probe.get('schema_version') != SCHEMA_VERSION:
    raise UsageError(f'plan.probe={directory!r}: {PROBE_FILE} is not a probe of schema '
                     f'{SCHEMA_VERSION}; run --mode=probe again')
  if not probe.get('compute', {}).get('points') or not probe.get('step_program'):
    raise UsageError(f'plan.probe={directory!r}: the probe timed no batch of the model '
                     '(none fit the device memory)')
  return probe


def check_same_model(probe: dict, config) -> None:
  """The probe timed the configured model at the configured size."""
  model = probe['model']
  mine = {'name': config.model.name, 'width': config.model.width,
          'depth': config.model.depth, 'image_size': config.data.image_size}
  theirs = {k: model.get(k, 0) for k in mine}  # 0: the variant's own depth
  if theirs != mine:
    raise UsageError(f'plan.probe: the probe timed {theirs}, but the config names {mine}; '
                     'plan the probed model or probe this one')


@dataclasses.dataclass(frozen=True)
class Network:
  """An all-reduce over the probe's p devices: its bus bandwidth."""
  participants: int
  busbw_bytes_per_s: float
  level: str  # which of the probe's levels it comes from

  def bandwidth_s(self, nbytes: float, n: int) -> float:
    """The bytes' time: each device moves 2(n-1)/n of them."""
    if n <= 1:
      return 0.0
    return nbytes * 2 * (n - 1) / n / self.busbw_bytes_per_s


def per_operand_s(probe: dict, n: int) -> float:
  """What each array of a step's all-reduce costs over n devices: the
  probe's per_operand_s over its p, scaled by a ring's steps, (n-1)/(p-1)."""
  step = probe['step_fixed_cost']
  if n <= 1:
    return 0.0
  return step['per_operand_s'] * (n - 1) / max(step['participants'] - 1, 1)


def array_cost_points(probe: dict) -> list[tuple[float, float]]:
  """[(array bytes, seconds)] an array of that size adds to a step over
  the probe's p devices beyond its bytes at the bus bandwidth: the tiny
  model's fit at its arrays' mean size, then each equal-array step's
  (step_fixed_cost.by_array_bytes), each less its own array's bytes at the
  bandwidth (which step_parts adds for all the bytes), never below 0."""
  step = probe['step_fixed_cost']
  p = step['participants']
  net = network(probe)
  fits = [(step['mean_array_bytes'], step['per_operand_s'])]
  fits += [(e['array_bytes'], e['per_operand_s']) for e in step['by_array_bytes']]
  return sorted((size, max(cost - net.bandwidth_s(size, p), 0.0)) for size, cost in fits)


def array_cost_s(points: list[tuple[float, float]], nbytes: float) -> float:
  """The cost of one array of `nbytes` (pure): `points` interpolated
  linearly in the logarithm of the size, the nearest point's outside them."""
  if nbytes <= points[0][0]:
    return points[0][1]
  for (s0, c0), (s1, c1) in zip(points, points[1:]):
    if nbytes <= s1:
      share = math.log(nbytes / s0) / math.log(s1 / s0)
      return c0 + share * (c1 - c0)
  return points[-1][1]


def arrays_s(probe: dict, n: int) -> float:
  """What the arrays of the model's step (step_program) add over n devices:
  each at the probe's cost for an array of its size where the probe timed
  arrays of several sizes (else every array at per_operand_s), scaled by a
  ring's steps, (n-1)/(p-1)."""
  program, step = probe['step_program'], probe['step_fixed_cost']
  if 'by_array_bytes' not in step or 'arrays_by_bytes' not in program:
    return program['operands'] * per_operand_s(probe, n)
  if n <= 1:
    return 0.0
  points = array_cost_points(probe)
  at_p = sum(count * array_cost_s(points, size) for size, count in program['arrays_by_bytes'])
  return at_p * (n - 1) / max(step['participants'] - 1, 1)


def network(probe: dict) -> Network:
  """The all-reduce fit over the most devices the probe measured: all of
  them (all_devices; with one device a host, inter_host is that same set),
  else one host's (intra_host)."""
  for level in ('all_devices', 'inter_host', 'intra_host'):
    entry = probe['collectives'].get(level, {})
    if entry.get('measured') and entry['all_reduce']['busbw_gbps']:
      fit = entry['all_reduce']
      return Network(entry['participants'],
                     units.gbps_to_bytes_per_s(fit['busbw_gbps']), level)
  raise UsageError('plan.probe: the probe measured no all-reduce across devices (one '
                   'device in all); probe a job of at least two devices')


def step_parts(probe: dict, per_device_batch: int, num_devices: int | None = None) -> dict:
  """{part: seconds} of a step at `per_device_batch` over `num_devices`
  (default: the probe's own), and their sum, 'step_s'."""
  points = {q['per_device_batch']: q.get('tree_compute_s', q['compute_s'])
            for q in probe['compute']['points']}
  if per_device_batch not in points:
    raise UsageError(f'plan.probe: the probe timed per-device batches {sorted(points)}, '
                     f'not {per_device_batch}')
  net = network(probe)
  n = num_devices or probe['provenance']['device_count']
  program = probe['step_program']
  parts = {
      'compute_s': points[per_device_batch],
      'update_s': probe['update']['update_s'],
      'fixed_s': probe['step_fixed_cost']['fixed_cost_s'] if n > 1 else 0.0,
      'arrays_s': arrays_s(probe, n),
      'bandwidth_s': net.bandwidth_s(program['bytes'], n),
  }
  parts['step_s'] = sum(parts.values())
  return parts


def predict(probe: dict, num_devices_list) -> list[dict]:
  """For every batch the probe timed and every device count: the step's
  parts, images/s and efficiency (T_C + T_update over the step)."""
  rows = []
  for q in probe['compute']['points']:
    b = q['per_device_batch']
    for n in num_devices_list:
      parts = step_parts(probe, b, n)
      alone = parts['compute_s'] + parts['update_s']
      rows.append({'per_device_batch': b, 'num_devices': n, **parts,
                   'images_per_sec': n * b / parts['step_s'],
                   'efficiency': alone / parts['step_s']})
  return rows


def sources(probe: dict) -> dict:
  """Which input came from where, for the plan's record and its words."""
  net = network(probe)
  return {
      'compute_s': 'probe (compute.points: tree_compute_s where timed, else compute_s)',
      'update_s': 'probe (update.update_s)',
      'fixed_s': 'probe (step_fixed_cost.fixed_cost_s)',
      'collectives': 'probe (step_program: the arrays of the compiled step\'s collectives, read, not run)',
      'per_array': 'probe (step_fixed_cost: steps of a tiny model and of equal arrays of '
                   'several sizes, each array of the step at the cost of its size)',
      'bandwidth': f'probe (collectives.{net.level}.all_reduce fit)',
      'more_devices': 'extrapolated: a ring over n devices (per-array cost x (n-1)/(p-1), '
                      'bytes x 2(n-1)/n at the bus bandwidth)',
  }


def devices_to_emulate(provenance: dict | None, num_workers: int, job_processes: int) -> int:
  """The CPU devices each process of a mesh plan emulates (pure): the plan's
  cluster (plan.num_workers, else the probed one's devices, else 0: the
  devices at hand), in a job of several processes each one's share of it.
  UsageError (one line) when the share is not whole."""
  devices = num_workers or (provenance['device_count'] if provenance else 0)
  if job_processes <= 1 or not devices:
    return devices
  if devices % job_processes:
    named = (f'plan.num_workers={num_workers}' if num_workers
             else f'the probe\'s {devices} devices')
    raise UsageError(f'{named} do not split over this job\'s {job_processes} processes; '
                     'plan with a device count they divide, or in one process')
  return devices // job_processes
