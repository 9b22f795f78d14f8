"""The all-reduce emulation: workers are devices, and their gradients travel
around a ring over the same paced links as the parameter-server engine's.

  ring.py     the ring's schedule (pure) and one worker's part in it
  update.py   every worker's optax update of the summed gradients, on its
              device, in one program over the worker devices
  engine.py   the step, its timings and metrics, and the state

It shares the links, the wire layout, the workers' gradient programs and
the threads with the parameter-server engine (trainer/engines/emulation/).
"""

from core.errors import UsageError
from trainer.engines.emulation import checks

CONFIG_SECTIONS = ('network', 'allreduce')
EMULATED = True
ALGORITHMS = ('ring', 'hierarchical')  # allreduce.algorithm


def check_section(config) -> None:
  """network.* and allreduce.* values, whatever the engine."""
  checks.check_network_section(config)
  if config.allreduce.algorithm not in ALGORITHMS:
    raise UsageError(f'allreduce.algorithm={config.allreduce.algorithm!r} is not '
                     f'accepted; use one of: {", ".join(ALGORITHMS)}')


def check_config(config) -> None:
  checks.check_data_parallel_only(config)


def check_against_devices(config, num_devices: int, num_processes: int) -> None:
  checks.check_workers_against_devices(config, num_devices, num_processes)


def create(exp):
  from trainer.engines.allreduce import engine  # pylint: disable=g-import-not-at-top
  return engine.AllReduceEngine(exp)


def host_timer(exp, cell: dict):
  """The step's host work for cell['num_workers'] workers in hosts of
  cell['devices_per_host'] and cell['algorithm'] (host_work.AllReduceHostTimer)."""
  from trainer.engines.allreduce import host_work  # pylint: disable=g-import-not-at-top
  return host_work.AllReduceHostTimer(exp, cell['num_workers'], cell['devices_per_host'],
                                      cell.get('algorithm', 'ring'))
