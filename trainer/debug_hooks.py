"""The tests' hooks into a run (debug.*): a failure or a pause at a known step.

The training loop calls `after_step` at one point after each step, once the
step's progress line and evaluation are done; an evaluation (the loop's, or
--mode=eval's) takes `pause_in_evaluation`'s callback. debug.nan_at_step is
no hook: it is part of the compiled step (trainer/step_functions.py).
"""

import math
import threading
import time
from typing import Callable, Iterator

from absl import logging
import jax

from configs.values import at_least
from core.errors import UsageError

_WHERE_IN_EVALUATION = 'in its evaluation, after batch 1 '


def check_config(config) -> None:
  """debug.*: -1 (off) or a step; UsageError with one line."""
  at_least('debug.nan_at_step', config.debug.nan_at_step, -1)
  at_least('debug.pause_at_step', config.debug.pause_at_step, -1)
  at_least('debug.stall_after_step', config.debug.stall_after_step, -1)
  if not math.isfinite(config.debug.stall_for_s):
    raise UsageError(f'debug.stall_for_s={config.debug.stall_for_s!r} must be a '
                     'finite number of seconds (0: for ever)')
  at_least('debug.stall_for_s', config.debug.stall_for_s, 0)
  at_least('debug.stall_process', config.debug.stall_process, -1)
  for key in ('slow_input_s', 'slow_step_s'):
    value = config.debug[key]
    if not math.isfinite(value):
      raise UsageError(f'debug.{key}={value!r} must be a finite number of seconds')
    at_least(f'debug.{key}', value, 0)
  at_least('debug.slow_process', config.debug.slow_process, -1)


def after_step(config, step: int, stop) -> None:
  """debug.fail_at_step raises; debug.pause_at_step waits for the stop
  signal (`stop`: a preemption.StopRequest); debug.slow_step_s sleeps, as a
  host that computes slowly."""
  _fail_if_injected(config, step)
  if config.debug.slow_step_s and _slowed(config):
    time.sleep(config.debug.slow_step_s)
  if step == config.debug.pause_at_step:
    _pause_until(step, stop.requested)


def pause_in_evaluation(config, step: int, stop=None) -> Callable[[int], bool] | None:
  """debug.pause_at_step=STEP at step STEP's evaluation, or in --mode=eval of
  checkpoint STEP: the callback, given the batches done, pauses after the
  first batch, so that the signal lands mid-pass. It waits until `stop`
  (a preemption.StopRequest) is requested; without one, for ever (the
  signal ends the process: main.py). It answers False (the pass goes on),
  as run_evaluation's stop_agreed. None when there is nothing to pause."""
  if config.debug.pause_at_step != step:
    return None
  requested = stop.requested if stop is not None else (lambda: False)

  def pause(batches_done: int) -> bool:
    if batches_done == 1:
      _pause_until(step, requested, _WHERE_IN_EVALUATION)
    return False
  return pause


def stalled_stream(config, batches: Iterator, start_step: int) -> Iterator:
  """debug.stall_after_step=STEP: the training stream (its first batch
  trains step start_step + 1) hands out step STEP's batch, then blocks for
  debug.stall_for_s seconds (0: for ever) before the next, as a host
  pipeline that stops producing; on debug.stall_process (-1: every one).
  A run resumed from step STEP or later does not block."""
  stall_after = config.debug.stall_after_step
  if stall_after <= start_step or config.debug.stall_process not in (
      jax.process_index(), -1):
    return batches
  return _stall_after(batches, stall_after - start_step, config.debug.stall_for_s)


def slowed_stream(config, batches: Iterator) -> Iterator:
  """debug.slow_input_s: the training stream sleeps that long before each
  batch on debug.slow_process (-1: every one), as a slow host pipeline."""
  if not config.debug.slow_input_s or not _slowed(config):
    return batches
  return _sleep_before_each(batches, config.debug.slow_input_s)


def _slowed(config) -> bool:
  return config.debug.slow_process in (jax.process_index(), -1)


def _sleep_before_each(batches: Iterator, sleep_s: float) -> Iterator:
  for batch in batches:
    time.sleep(sleep_s)
    yield batch


def _stall_after(batches: Iterator, count: int, stall_s: float) -> Iterator:
  for done, batch in enumerate(batches):
    if done == count:
      logging.warning('Input blocked after %d batches (debug.stall_after_step) %s',
                      count, f'for {stall_s:g} s' if stall_s else 'for ever')
      if stall_s:
        time.sleep(stall_s)
      else:
        threading.Event().wait()
    yield batch


def _fail_if_injected(config, step: int) -> None:
  """debug.fail_at_step: the failure the tests inject."""
  if step == config.debug.fail_at_step and jax.process_index() in (
      config.debug.fail_process, -1):
    raise RuntimeError(f'debug.fail_at_step={step}: the failure this key injects, '
                       f'on process {jax.process_index()}')


def _pause_until(step: int, requested: Callable[[], bool], where: str = '') -> None:
  """Waits, after the line the tests wait for, until `requested()`: the
  tests' way to signal a run at a known step, whatever the machine's speed."""
  logging.warning('Paused at step %d %s(debug.pause_at_step) until a stop signal',
                  step, where)
  while not requested():
    time.sleep(0.01)
