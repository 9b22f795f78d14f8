"""The ways gradients meet: one package per engine, found through REGISTRY.

The training loop (trainer/train.py) drives an engine through `Engine` below
and knows nothing else about it. The model, the loss and gradient code
(trainer/step_functions.py), the optimiser, the input, metrics and checkpoints are
shared; the engines differ only in where the parameters live and how the
workers' gradients are combined:

  spmd/    one jit-compiled program over the device mesh; XLA inserts the
           collectives (all-reduce for data parallelism, all-gather and
           reduce-scatter for FSDP, ...).
  ps/      a parameter-server emulation: worker devices push gradients to
           server shards in host memory over paced links and pull parameters
           back (ARCHITECTURE.md, the parameter-server emulation).
  allreduce/  an all-reduce emulation: the workers' gradients travel around
           a ring over the same paced links, and every worker applies the
           same update (ARCHITECTURE.md, the all-reduce emulation).
  emulation/  the floor under both emulated engines (imports neither):
           links, the network spec, the wire layout, the workers' gradient
           programs, threads and the timers of the workers' own work.

An engine module (or package) exports what the rest of the project needs of
it, and nothing else is imported from outside it:

  create(exp) -> Engine        the engine, compiled and ready to start
  CONFIG_SECTIONS              the config sections it reads ('network', ...)
  EMULATED                     True when it runs over emulated links (the
                               study paces them and predicts its step)
  check_section(config)        value checks of its sections, whatever the
                               configured engine (the planner reads them)
  check_config(config)         checks when it is the configured engine
  check_against_devices(config, num_devices, num_processes)
  host_timer(exp, cell)        (EMULATED only) the host's own work of its
                               step on unlimited links, timed for the study

A new engine is one module or package and one REGISTRY line.
"""

import importlib
from typing import Protocol


class Engine(Protocol):
  """What the training loop calls; every engine implements it."""

  # Where the loop puts each global batch (a jax Sharding).
  batch_sharding: object
  # The metrics (seconds) that split a step's time into its phases, in
  # order; the progress line shows their shares. () for none.
  step_phases: tuple[str, ...]

  def start(self, state, meta: dict | None = None) -> None:
    """Takes the initial (fresh or restored) TrainState; the engine owns it
    now. meta: the metadata its checkpoint was saved with (None for a fresh
    state)."""

  def step(self, batch) -> None:
    """Starts one global step on `batch`; may return before it finishes."""

  def collect_metrics(self) -> list[dict]:
    """Per-step metrics (host numbers) of every step started so far and not
    yet collected, in step order; waits for those steps to finish. Each has
    at least loss, accuracy, lr, grad_norm and finite (0 or 1)."""

  def state(self):
    """The TrainState after the last started step, laid out as the SPMD
    engine keeps it (so checkpoints and evaluation are engine-independent)."""

  def checkpoint_meta(self) -> dict:
    """What a checkpoint of state() keeps in its metadata besides it, for
    this engine's start() to resume exactly (JSON values; {} when nothing)."""

  def close(self) -> None:
    """Stops background work; the engine is unusable afterwards. Raises if
    a thread of its own does not end."""


# engine name -> its module. Imported on use: a run loads the engines it
# names only (an engine's heavy modules load when it is created).
REGISTRY = {
    'spmd': 'trainer.engines.spmd',
    'ps': 'trainer.engines.ps',
    'allreduce': 'trainer.engines.allreduce',
}


def names() -> tuple[str, ...]:
  return tuple(REGISTRY)


def package(name: str):
  """The module of engine `name` (one of names())."""
  return importlib.import_module(REGISTRY[name])


def emulated_names() -> tuple[str, ...]:
  """The engines that run over emulated links, whose links the study paces."""
  return tuple(n for n in REGISTRY if package(n).EMULATED)


def check_config(config) -> None:
  """engine names a registered engine; every engine's sections are checked
  whatever the engine (the planner and the study read them); the configured
  engine checks the rest it needs. UsageError with one line."""
  from configs.values import one_of  # pylint: disable=g-import-not-at-top
  one_of('engine', config.engine, names())
  for name in names():
    package(name).check_section(config)
  package(config.engine).check_config(config)


def check_against_devices(config, num_devices: int, num_processes: int) -> None:
  """The configured engine's checks that need the device and process counts."""
  package(config.engine).check_against_devices(config, num_devices, num_processes)


def create_engine(exp) -> Engine:
  """The configured engine, compiled and ready to start (nothing written)."""
  return package(exp.config.engine).create(exp)
