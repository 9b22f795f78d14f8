"""Config checks both emulated engines share: the network section's values,
a data-parallel mesh only, and workers that fit the devices and the batch.
Each raises UsageError with one line."""

import math

from core.errors import UsageError
from trainer.engines.emulation import network


def check_network_section(config) -> None:
  """network.* values, whatever the engine (the planner and study read them)."""
  net = config.network
  for key in ('num_workers',):
    if net[key] < 0:
      raise UsageError(f'network.{key}={net[key]} must be >= 0')
  if net.devices_per_host < 1:
    raise UsageError(f'network.devices_per_host={net.devices_per_host} must be >= 1')
  for key in ('bandwidth_gbps', 'latency_ms', 'intra_host_gbps', 'intra_host_latency_ms'):
    if not math.isfinite(net[key]) or net[key] < 0:
      raise UsageError(f'network.{key}={net[key]!r} must be a finite number > 0, '
                       'or 0 for ' + ('unlimited' if key.endswith('gbps') else 'none'))


def check_data_parallel_only(config) -> None:
  """The emulated engines split the batch over workers and nothing else."""
  if config.mesh.fsdp != 1 or config.mesh.tensor != 1:
    raise UsageError(
        f'engine={config.engine} emulates data parallelism only, but mesh.fsdp='
        f'{config.mesh.fsdp} and mesh.tensor={config.mesh.tensor}; set both '
        'to 1 (or use engine=spmd)')
  if config.mesh.shard_update:
    raise UsageError(f'mesh.shard_update splits the SPMD update over the data '
                     f'axis; engine={config.engine} updates on its own (ps: on '
                     'the server shards; allreduce: on every worker); set '
                     'mesh.shard_update=false')


def check_workers_against_devices(config, num_devices: int, num_processes: int) -> None:
  """N_w workers on this process's devices, in hosts of G, each with an
  equal slice of the batch that its batch-norm groups divide."""
  if num_processes > 1:
    raise UsageError(f'engine={config.engine} emulates a cluster inside one '
                     f'process, but {num_processes} processes were started; '
                     'use engine=spmd across hosts')
  workers = network.num_workers(config.network, num_devices)
  if workers > num_devices:
    raise UsageError(f'network.num_workers={workers} but only {num_devices} devices '
                     'are present; workers are devices')
  per_host = config.network.devices_per_host
  if workers % per_host:
    raise UsageError(f'network.devices_per_host={per_host} does not divide the '
                     f'{workers} workers into hosts; use a divisor of {workers}')
  if config.batch_size % workers:
    raise UsageError(f'batch_size={config.batch_size} does not divide over the '
                     f'{workers} workers (network.num_workers); use a multiple of {workers}')
  per_worker = config.batch_size // workers
  if per_worker % config.grad_accum_steps:
    raise UsageError(
        f'grad_accum_steps={config.grad_accum_steps} does not divide the '
        f'per-worker batch of {per_worker}')
  group = config.model.bn_group_size
  micro = per_worker // config.grad_accum_steps
  if group and micro % group:
    raise UsageError(
        f'model.bn_group_size={group}: a worker keeps batch-norm statistics '
        f'of its own {micro} examples only, so groups must divide {micro} '
        '(or set 0: each worker\'s whole slice)')
