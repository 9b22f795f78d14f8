"""Decisions that every process of a run must make alike.

A save is a collective (orbax writes every process's shards together) and
so is every train step: if one process decided to save or to stop at a step
where another did not, the run would deadlock. So the decisions that depend
on something one process sees (a signal it received, the clock of
checkpoint.every_minutes) are exchanged at fixed steps,
runtime.agree_every_steps apart, in one small all-gather: a stop request on
any process stops all; a time-based save follows process 0's clock. Between
those steps no process waits for the others, so the host keeps dispatching
ahead of the devices. With one process the decisions are local and free,
and made after every step.
"""

import numpy as np


class Agreement:

  def __init__(self, process_count: int, every_steps: int):
    self._process_count = process_count
    self._every_steps = every_steps if process_count > 1 else 1

  def due(self, step: int) -> bool:
    """Whether processes agree after `step` (the same answer on all)."""
    return step % self._every_steps == 0

  def decide(self, stop_requested: bool, save_due_here: bool) -> tuple[bool, bool]:
    """(stop, save): stop if any process was asked to; save if process 0's
    clock says so."""
    if self._process_count == 1:
      return stop_requested, save_due_here
    flags = gather_from_processes(np.array([stop_requested, save_due_here], np.int32))
    return bool(flags[:, 0].any()), bool(flags[0, 1])


def gather_from_processes(array: np.ndarray) -> np.ndarray:
  """[process_count, ...]: every process's `array` (a collective: call it
  on every process at the same point)."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return np.asarray(multihost_utils.process_allgather(array)).reshape(-1, *array.shape)
