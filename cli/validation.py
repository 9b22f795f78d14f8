"""Checks a config for values that cannot work, before anything heavy runs.

Each check lives with what it guards; this is the list main.py runs, in
order. `check_config` needs no devices; `check_against_devices` runs once
the runtime knows how many devices and processes there are. Both raise
UsageError with one line that names the key and what is accepted. The
modules listed start no JAX backend when imported or run
(tests/test_engine_registry.py): jax.distributed.initialize comes after.
"""

import ml_collections

from cli import runtime
from input_pipeline import augment_checks
from models import checks as model_checks
from modes import checks as mode_checks
from planner import checks as planner_checks
from trainer import debug_hooks
from trainer import engines
from trainer import experiment
from trainer import input_wait
from trainer import loop_checks
from trainer import memory
from trainer import mesh
from trainer import optim
from trainer import profiling
from trainer import wandb_tracker


def check_config(config: ml_collections.ConfigDict) -> None:
  """Value checks that need neither devices nor data (input_pipeline checks
  config.data itself)."""
  model_checks.check_config(config)
  experiment.check_config(config)  # length, batch, seed
  mode_checks.check_bench(config)
  profiling.check_config(config)
  optim.check_config(config)
  augment_checks.check_augmentation(config)
  mesh.check_config(config)  # the mesh and the sharding rules
  engines.check_config(config)
  planner_checks.check_config(config)  # plan.* and study.*
  debug_hooks.check_config(config)
  input_wait.check_config(config)  # data.stall_timeout_s
  loop_checks.check_start(config)
  loop_checks.check_cadences(config)
  mode_checks.check_checkpoint_choice(config)
  loop_checks.check_evaluation(config)
  mode_checks.check_predict(config)
  mode_checks.check_export(config)
  runtime.check_config(config)
  wandb_tracker.check_config(config)  # metrics.*


def check_against_devices(config: ml_collections.ConfigDict, *,
                          num_devices: int, num_processes: int) -> None:
  """Checks that need the device and process counts."""
  mesh.check_against_devices(config, num_devices=num_devices, num_processes=num_processes)
  engines.check_against_devices(config, num_devices, num_processes)
  memory.check_host_batches(config, num_processes, memory.read_host_memory_limit())


def check_study_cell(config: ml_collections.ConfigDict, num_devices: int) -> None:
  """A cell of --mode=study is a config of its own: every check, on the
  cell's devices in one process (planner/study.py runs it on each cell)."""
  check_config(config)
  check_against_devices(config, num_devices=num_devices, num_processes=1)


def ignored_engine_keys(config: ml_collections.ConfigDict) -> list[str]:
  """The keys of engines other than the configured one (their
  CONFIG_SECTIONS) set away from their defaults in a run that trains or
  benchmarks, where they do nothing (the planner and the study read them
  whatever the engine)."""
  from configs import default  # pylint: disable=g-import-not-at-top
  defaults = default.get_config()
  used = engines.package(config.engine).CONFIG_SECTIONS
  sections = {s for n in engines.names() for s in engines.package(n).CONFIG_SECTIONS}
  ignored = []
  for section in sorted(sections):
    if section in used:
      continue
    ignored += [f'{section}.{key}' for key in sorted(config[section])
                if config[section][key] != defaults[section][key]]
  return ignored
