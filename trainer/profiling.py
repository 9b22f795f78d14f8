"""Tracing chosen train steps with the JAX profiler, for TensorBoard.

`profile_steps='A,B'` traces the steps that take the step counter from A to
B (A..B-1) into WORKDIR/profile; TensorBoard's profile tab reads it
(`tensorboard --logdir WORKDIR/profile`, with the tensorboard-plugin-profile
package). Only process 0 traces.
"""

import contextlib
import os

from absl import logging
import jax

from configs import values

PROFILE_DIR_NAME = 'profile'


def check_config(config) -> None:
  """profile_steps: UsageError unless '' or 'A,B' with 1 <= A < B."""
  values.profile_steps(config.profile_steps)


class StepTracer:
  """Starts the trace before step A runs and stops it once step B-1 is done."""

  def __init__(self, workdir: str, profile_steps: str, enabled: bool):
    steps = values.profile_steps(profile_steps)  # None when ''
    self._steps = steps if enabled else None
    self._directory = os.path.join(workdir, PROFILE_DIR_NAME)
    self._active = False

  def before_step(self, step: int) -> None:
    """`step`: the counter before the step runs."""
    if self._steps and not self._active and self._steps[0] <= step < self._steps[1]:
      jax.profiler.start_trace(self._directory)
      self._active = True

  def annotated(self, step: int):
    """Around the step that takes the counter from `step`: while tracing,
    the profiler's step marker, which its step view (overview page, trace
    viewer's Steps row) reads step times from."""
    if not self._active:
      return contextlib.nullcontext()
    return jax.profiler.StepTraceAnnotation('train', step_num=step)

  def after_step(self, step: int, wait_for) -> None:
    """`step`: the counter after the step; `wait_for`: what to block on so
    that the traced steps have finished on the devices."""
    if self._active and step >= self._steps[1]:
      jax.block_until_ready(wait_for())
      self.stop()
      logging.info('Traced steps %d..%d into %s', self._steps[0], step - 1,
                   self._directory)

  def stop(self) -> None:
    if self._active:
      jax.profiler.stop_trace()
      self._active = False
