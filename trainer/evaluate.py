"""Evaluation: the compiled eval step and a full pass over the eval split.

The training loop evaluates with it, and so does --mode=eval (modes/eval.py).
"""

import functools
import time
from typing import Callable

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from coordination import agreement
from trainer import device_input
from trainer import experiment
from trainer import input_wait
from trainer import memory
from trainer import progress
from trainer import specs
from trainer import step_functions

_PROGRESS_EVERY_S = 30.0


def compile_eval_step(exp: experiment.Experiment):
  """The eval step compiled for the state's layout and one eval batch."""
  fn = jax.jit(functools.partial(step_functions.eval_step, model=exp.model),
               in_shardings=(exp.state_shardings, exp.batch_sharding))
  return fn


# What to change when the eval step does not fit.
EVAL_REMEDY = ('Lower the eval batch (eval.batch_size, 0: batch_size) or '
               'data.image_size, or shard the parameters (mesh.fsdp)')


def compile_checked_eval_step(exp: experiment.Experiment):
  """The eval step compiled ahead for one eval batch of the dataset, so
  that --mode=eval refuses a step that does not fit (memory.step_limit)
  before any batch is read; called as compile_eval_step's is."""
  size = exp.dataset.eval_batch_size
  spec = specs.batch_spec(size, exp.config.data.image_size, exp.batch_sharding)
  spec['mask'] = jax.ShapeDtypeStruct((size,), jnp.bool_, sharding=exp.batch_sharding)
  with exp.tracing_context():
    compiled = compile_eval_step(exp).lower(exp.abstract_state, spec).compile()
  usage = memory.report(compiled, exp.abstract_state)
  logging.info('Compiled the eval step; memory %s', usage.describe())
  memory.check_fits(usage, memory.step_limit(exp.config.runtime.device_memory_gib),
                    what='the eval step', remedy=EVAL_REMEDY)
  return compiled


def run_evaluation(exp: experiment.Experiment, eval_fn, state,
                   stop_agreed: Callable[[int], bool] | None = None,
                   stop_requested: Callable[[], bool] | None = None) -> dict | None:
  """Top-1/top-5/loss over every eval example exactly once.

  The batches are prefetched to the devices and the sums stay there until
  the pass ends, so the host never waits for a batch's result before
  dispatching the next.

  stop_agreed(batches_done), asked before the first batch and between
  batches, ends the pass when it says True: then the result is None and
  nothing of the partial pass is kept (a preemption must not wait for a
  pass of minutes, and a part of the split is no result). In a run of
  several processes it must answer alike on every process (train.py agrees
  on it), or one would leave the pass while another waits in the next
  batch's collectives.

  The batches are waited for in slices (trainer/input_wait.py): a stalled
  pipeline raises InputStalled after data.stall_timeout_s, and
  stop_requested() true during a wait ends the pass as stop_agreed does.
  """
  batches = device_input.DevicePrefetcher(
      exp.dataset.eval_batches(), exp.batch_sharding,
      size=exp.config.data.prefetch_batches,
      pipeline=input_wait.pipeline_name(exp.config, evaluation=True),
      stall_timeout_s=exp.config.data.stall_timeout_s, stop_requested=stop_requested)
  totals = None
  # ImageNet's 50,000 images take minutes: a line now and then says how far.
  started, every = time.monotonic(), progress.Every(_PROGRESS_EVERY_S)
  total = exp.dataset.num_eval_batches
  with exp.tracing_context():
    if stop_agreed is not None and stop_agreed(0):
      return _stopped(0, total)
    done = 0
    while True:
      try:
        batch = next(batches, None)
      except input_wait.StopWhileWaiting:
        return _stopped(done, total)
      if batch is None:
        break
      done += 1
      sums = eval_fn(state, batch)
      totals = sums if totals is None else _add_sums(totals, sums)
      if done < total and stop_agreed is not None and stop_agreed(done):
        return _stopped(done, total)
      if done < total and every.due():
        logging.info('evaluating: batch %d/%d, %s', done, total,
                     progress.eta_text(done, total, time.monotonic() - started))
  totals = jax.device_get(totals)
  count = int(totals['count'])
  # Unreadable images are masked out of the metrics and counted apart, so
  # that num_examples + num_unreadable is always the whole split.
  unreadable = _sum_over_processes(exp.dataset.skipped_counts()['eval'])
  if count + unreadable != exp.dataset.num_eval_examples:
    logging.error('Evaluation saw %d readable + %d unreadable examples but the '
                  'split has %d', count, unreadable, exp.dataset.num_eval_examples)
  return {
      'loss': float(totals['loss_sum']) / max(count, 1),
      'accuracy': float(totals['correct']) / max(count, 1),
      'top5': float(totals['correct_top5']) / max(count, 1),
      'num_examples': count,
      'num_unreadable': unreadable,
  }


def _stopped(done: int, total: int) -> None:
  logging.warning('Evaluation stopped after batch %d/%d: no result is kept', done, total)


@jax.jit
def _add_sums(totals: dict, sums: dict) -> dict:
  return jax.tree.map(jnp.add, totals, sums)


def _sum_over_processes(value: int) -> int:
  if jax.process_count() == 1:
    return int(value)
  return int(np.sum(agreement.gather_from_processes(np.int64(value))))
