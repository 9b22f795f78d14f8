"""Checks of the plan.* and study.* keys, before the runtime starts.

Imported by main.py's checks (cli/validation.py) before the runtime starts,
so it imports no module that starts a JAX backend (the planner's others do:
tests/test_engine_registry.py holds it to that). UsageError with one line
that names the key.
"""

import math

from configs.values import parse_list, parse_names, plan_batches
from configs.values import PLAN_PARALLELISMS, PLAN_TARGETS, PS_PLACEMENTS, at_least, one_of
from core.errors import UsageError
from models import checks as model_checks
from models import registry
from trainer import engines
from trainer.engines import allreduce


def check_config(config) -> None:
  """plan.* and study.*, whatever the mode (the values of a bad study or plan
  fail before anything runs)."""
  plan, study = config.plan, config.study
  if any(b < 1 for b in parse_list('plan.per_worker_batch_sizes', plan.per_worker_batch_sizes)):
    raise UsageError(f'plan.per_worker_batch_sizes={plan.per_worker_batch_sizes!r}: sizes must be >= 1')
  at_least('plan.repeats', plan.repeats, 1)
  at_least('plan.num_workers', plan.num_workers, 0)
  if not 0 < plan.link_bandwidth_gbps < math.inf:
    raise UsageError(f'plan.link_bandwidth_gbps={plan.link_bandwidth_gbps!r} must be a '
                     'finite number > 0 (the link of the cluster to plan for)')
  for key in ('link_latency_ms', 'compute_s', 'device_tflops'):
    if not 0 <= plan[key] < math.inf:
      raise UsageError(f'plan.{key}={plan[key]!r} must be a finite number >= 0')
  if not 0 < plan.device_utilization <= 1:
    raise UsageError(f'plan.device_utilization={plan.device_utilization!r} must be '
                     'in (0, 1]: the fraction of the device peak a step reaches')
  one_of('plan.target', plan.target, PLAN_TARGETS)
  one_of('plan.parallelism', plan.parallelism, PLAN_PARALLELISMS)
  if plan.parallelism == 'mesh':
    if plan.compute_s:
      raise UsageError('plan.compute_s is for plan.parallelism=data; the mesh plan costs '
                       'compute from FLOPs at plan.device_tflops or a probe\'s rate')
    if plan.target == 'here':
      raise UsageError('plan.parallelism=mesh plans a cluster (plan.target=cluster) '
                       'named by plan.device_tflops or plan.probe')
  at_least('plan.time_steps', plan.time_steps, 0)
  if plan.time_steps and plan.parallelism != 'mesh':
    raise UsageError(f'plan.time_steps={plan.time_steps} times the answers of a mesh plan; '
                     'set plan.parallelism=mesh or leave it 0')
  if plan.time_steps and not plan.probe:
    raise UsageError(f'plan.time_steps={plan.time_steps} times the answered meshes on the '
                     'devices at hand, which only a probe of them costs; set plan.probe to '
                     'a --mode=probe work dir of these devices')
  named_by = [k for k in ('compute_s', 'device_tflops', 'probe') if plan[k]]
  if len(named_by) > 1:
    raise UsageError(f'plan.{named_by[0]} and plan.{named_by[1]} both give the '
                     "cluster's compute time; set one of them")
  if plan.target == 'here' and named_by:
    raise UsageError(f'plan.target=here times the devices at hand, but plan.{named_by[0]} '
                     'names other devices; remove one of them')
  _check_plan_cluster(plan)
  study_models = parse_names('study.models', study.models, registry.MODEL_NAMES, 'model')
  parse_names('study.engines', study.engines, engines.emulated_names(), 'engine')
  parse_names('study.allreduce_algorithms', study.allreduce_algorithms,
              allreduce.ALGORITHMS, 'algorithm')
  for key in ('num_workers', 'num_shards', 'global_batch_sizes', 'devices_per_host'):
    if any(v < 1 for v in parse_list(f'study.{key}', study[key])):
      raise UsageError(f'study.{key}={study[key]!r}: values must be >= 1')
  bandwidths = parse_list('study.link_bandwidths_gbps', study.link_bandwidths_gbps, float)
  if any(not 0 < b < math.inf for b in bandwidths):
    raise UsageError(f'study.link_bandwidths_gbps={study.link_bandwidths_gbps!r}: every '
                     'bandwidth must be a finite number > 0')
  at_least('study.steps', study.steps, 1)
  at_least('study.model_width', study.model_width, 0)
  for name in study_models:
    model_checks.check_model_sizes('study.model_width', name, study.model_width,
                                   config.data.image_size)


def _check_plan_cluster(plan) -> None:
  """The hosts, links and strategies of the cluster to plan for."""
  at_least('plan.devices_per_host', plan.devices_per_host, 1)
  if plan.num_workers and plan.num_workers % plan.devices_per_host:
    raise UsageError(f'plan.devices_per_host={plan.devices_per_host} does not divide '
                     f'plan.num_workers={plan.num_workers}: hosts hold the same number of devices')
  zero_means = {'intra_host_gbps': 'unlimited', 'intra_host_latency_ms': 'none',
                'device_memory_gib': 'as the devices at hand'}
  for key, meaning in zero_means.items():
    if not 0 <= plan[key] < math.inf:
      raise UsageError(f'plan.{key}={plan[key]!r} must be a finite number >= 0 (0: {meaning})')
  at_least('plan.host_cores', plan.host_cores, 0)
  if not 0 < plan.host_cpu_ms_per_image < math.inf:
    raise UsageError(f'plan.host_cpu_ms_per_image={plan.host_cpu_ms_per_image!r} must be a '
                     'finite number > 0 (CPU ms per image)')
  one_of('plan.ps_placement', plan.ps_placement, PS_PLACEMENTS)
  parse_names('plan.allreduce_algorithms', plan.allreduce_algorithms,
              allreduce.ALGORITHMS, 'algorithm')
  at_least('plan.compute_s_batch', plan.compute_s_batch, 0)
  if plan.compute_s_batch and not plan.compute_s:
    raise UsageError(f'plan.compute_s_batch={plan.compute_s_batch} says which batch '
                     'plan.compute_s is for; set plan.compute_s too')


def check_plan_mode(config) -> None:
  """--mode=plan's own checks, before the runtime starts: the devices it
  plans for are named, and the batches it plans are whole batch-norm groups
  (configs/values.py: plan_batches)."""
  check_plan_devices_named(config.plan)
  plan_batches(config)


def check_plan_devices_named(plan) -> None:
  """--mode=plan plans a cluster of named devices: their peak, a stated
  compute time or a probe of them; the devices at hand only when asked
  (plan.target=here). UsageError otherwise, before anything starts."""
  if plan.target == 'cluster' and not (plan.device_tflops or plan.compute_s or plan.probe):
    raise UsageError(
        "--mode=plan needs the cluster's devices: set plan.device_tflops (their "
        'peak TFLOP/s), plan.compute_s (a step time measured on one) or '
        'plan.probe (a work dir of --mode=probe on them); or plan.target=here '
        'to plan a cluster of the devices at hand')


def check_one_process(mode: str, process_count: int) -> None:
  """The planner's measurements run on one process's devices: the emulated
  engines and their timers (trainer/engines/emulation/) place workers on
  devices this process addresses. UsageError when the job has more
  processes: main.py asks before the runtime starts (--num_processes), so
  that every process says so in its own line; the modes ask again after it
  (a scheduler's processes)."""
  if process_count > 1:
    raise UsageError(f'--mode={mode} measures on the devices of one process, and this '
                     f'job has {process_count}: run it as one process (a plan from a '
                     'probe, plan.probe, may run under launch.py or a scheduler)')

