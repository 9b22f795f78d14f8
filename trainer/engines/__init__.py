"""The two ways gradients meet: one module per engine, one small interface.

The training loop (trainer/train.py) drives an engine through `Engine` below
and knows nothing else about it. The model, the loss and gradient code
(trainer/step_functions.py), the optimiser, the input, metrics and checkpoints are
shared; the engines differ only in where the parameters live and how the
workers' gradients are combined:

  spmd.py  one jit-compiled program over the device mesh; XLA inserts the
           collectives (all-reduce for data parallelism, all-gather and
           reduce-scatter for FSDP, ...).
  ps/      a parameter-server emulation: worker devices push gradients to
           server shards in host memory over paced links and pull parameters
           back (ARCHITECTURE.md, the parameter-server emulation).
  allreduce/  an all-reduce emulation: the workers' gradients travel around
           a ring over the same paced links, and every worker applies the
           same update (ARCHITECTURE.md, the all-reduce emulation).
  emulation/  what the two emulated engines share: links, the wire layout,
           the workers' gradient programs, threads.
"""

import importlib
from typing import Protocol

from trainer.state import TrainState


class Engine(Protocol):
  """What the training loop calls; both engines implement it."""

  # Where the loop puts each global batch (a jax Sharding).
  batch_sharding: object
  # The metrics (seconds) that split a step's time into its phases, in
  # order; the progress line shows their shares. () for none.
  step_phases: tuple[str, ...]

  def start(self, state: TrainState, meta: dict | None = None) -> None:
    """Takes the initial (fresh or restored) state; the engine owns it now.
    meta: the metadata its checkpoint was saved with (None for a fresh state)."""

  def step(self, batch) -> None:
    """Starts one global step on `batch`; may return before it finishes."""

  def collect_metrics(self) -> list[dict]:
    """Per-step metrics (host numbers) of every step started so far and not
    yet collected, in step order; waits for those steps to finish. Each has
    at least loss, accuracy, lr, grad_norm and finite (0 or 1)."""

  def state(self) -> TrainState:
    """The state after the last started step, laid out as the SPMD engine
    keeps it (so checkpoints and evaluation are engine-independent)."""

  def checkpoint_meta(self) -> dict:
    """What a checkpoint of state() keeps in its metadata besides it, for
    this engine's start() to resume exactly (JSON values; {} when nothing)."""

  def close(self) -> None:
    """Stops background work; the engine is unusable afterwards. Raises if
    a thread of its own does not end."""


# engine name -> 'module:class'. Imported on use: the emulated engines'
# modules are not loaded by a run that does not use them.
REGISTRY = {
    'spmd': 'trainer.engines.spmd:SpmdEngine',
    'ps': 'trainer.engines.ps.engine:create',
    'allreduce': 'trainer.engines.allreduce.engine:AllReduceEngine',
}


def create_engine(exp) -> Engine:
  """The configured engine, compiled and ready to start (nothing written)."""
  module, name = REGISTRY[exp.config.engine].split(':')
  return getattr(importlib.import_module(module), name)(exp)
