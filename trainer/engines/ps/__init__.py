"""The parameter-server engine: workers are devices, server shards live in
host memory, and every byte between them crosses an emulated network link.

  partition.py  which shard owns which rows of which variable (pure)
  shard.py      a server shard: its variables, optimiser state and updates
  state_split.py  TrainState <-> per-shard pieces (checkpoints stay SPMD's)
  cluster.py    what both modes share: the worker devices, the shards, the
                NICs, push and pull, counters, state in and out
  sync_engine.py  the synchronous engine: push, aggregate and update, pull
  async_engine.py  the asynchronous engine; async_workers.py its worker
                threads (stale-synchronous parallel)
  engine.py     `create`: the engine of the configured ps.mode
The links, the wire layout, the workers' programs and the threads are the
emulated engines' shared parts (trainer/engines/emulation/).
"""

from core.errors import UsageError
from trainer.engines.emulation import checks

CONFIG_SECTIONS = ('network', 'ps')
EMULATED = True
MODES = ('sync', 'async')  # ps.mode
PARTITIONERS = ('greedy', 'round_robin')  # ps.partitioner


def check_section(config) -> None:
  """network.* and ps.* values, whatever the engine (the planner reads them)."""
  checks.check_network_section(config)
  ps = config.ps
  if ps.num_shards < 1:
    raise UsageError(f'ps.num_shards={ps.num_shards} must be >= 1')
  for key, accepted in (('mode', MODES), ('partitioner', PARTITIONERS)):
    if ps[key] not in accepted:
      raise UsageError(f'ps.{key}={ps[key]!r} is not accepted; use one of: '
                       f'{", ".join(accepted)}')
  if ps.max_staleness < 0:
    raise UsageError(f'ps.max_staleness={ps.max_staleness} must be >= 0 '
                     '(steps a worker may run ahead of the slowest)')
  if ps.mode == 'sync' and ps.max_staleness != 1:
    raise UsageError(f'ps.max_staleness={ps.max_staleness} applies to '
                     'ps.mode=async only; remove it or set ps.mode=async')


def check_config(config) -> None:
  """What engine=ps needs of the rest of the config."""
  checks.check_data_parallel_only(config)
  ps = config.ps
  if ps.overlap and ps.mode != 'sync':
    raise UsageError('ps.overlap is built for ps.mode=sync only; set one of '
                     'them differently')
  if ps.overlap and config.grad_accum_steps > 1:
    raise UsageError('ps.overlap pushes each gradient once, as backprop makes '
                     f'it, but grad_accum_steps={config.grad_accum_steps} makes '
                     'several per step; use one or the other')
  if config.optimizer in ('lars', 'lamb') and ps.partitioner != 'round_robin':
    raise UsageError(f'optimizer={config.optimizer} with engine=ps: the trust ratio '
                     f'needs whole variables on each shard; set '
                     f'ps.partitioner=round_robin')


def check_against_devices(config, num_devices: int, num_processes: int) -> None:
  checks.check_workers_against_devices(config, num_devices, num_processes)


def create(exp):
  """The parameter-server engine of exp.config.ps.mode (validated already)."""
  from trainer.engines.ps import engine  # pylint: disable=g-import-not-at-top
  return engine.create(exp)


def host_timer(exp, cell: dict):
  """The synchronous step's host work for cell['num_workers'] workers and
  cell['num_shards'] shards (host_work.HostTimer)."""
  from trainer.engines.ps import host_work  # pylint: disable=g-import-not-at-top
  return host_work.HostTimer(exp, cell['num_workers'], cell['num_shards'])


def largest_shard_bytes(exp, num_shards: int) -> int:
  """The bytes of the largest of num_shards shards under ps.partitioner."""
  from trainer.engines.ps import host_work  # pylint: disable=g-import-not-at-top
  return host_work.largest_shard_bytes(exp, num_shards)
