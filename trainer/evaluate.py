"""Evaluation: the compiled eval step, a full pass, and --mode=eval."""

import dataclasses
import functools
import json

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from configs.errors import UsageError
from trainer import agreement
from trainer import checkpointing
from trainer import device_input
from trainer import experiment
from trainer import metrics_log
from trainer import step_functions
from trainer import unreadable


def compile_eval_step(exp: experiment.Experiment):
  """The eval step compiled for the state's layout and one eval batch."""
  fn = jax.jit(functools.partial(step_functions.eval_step, model=exp.model),
               in_shardings=(exp.state_shardings, exp.batch_sharding))
  return fn


def run_evaluation(exp: experiment.Experiment, eval_fn, state) -> dict:
  """Top-1/top-5/loss over every eval example exactly once.

  The batches are prefetched to the devices and the sums stay there until
  the pass ends, so the host never waits for a batch's result before
  dispatching the next.
  """
  batches = device_input.DevicePrefetcher(
      exp.dataset.eval_batches(), exp.batch_sharding,
      size=exp.config.data.prefetch_batches)
  totals = None
  with exp.tracing_context():
    for batch in batches:
      sums = eval_fn(state, batch)
      totals = sums if totals is None else _add_sums(totals, sums)
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


@jax.jit
def _add_sums(totals: dict, sums: dict) -> dict:
  return jax.tree.map(jnp.add, totals, sums)


def _sum_over_processes(value: int) -> int:
  if jax.process_count() == 1:
    return int(value)
  return int(np.sum(agreement.gather_from_processes(np.int64(value))))


def summary_json(summary: dict) -> str:
  keys = ('step', 'accuracy', 'top5', 'loss', 'num_examples')
  return json.dumps({k: summary[k] for k in keys})


def weights_only(exp: experiment.Experiment) -> experiment.Experiment:
  """`exp` for a state without optimiser state (opt_state=None), as
  Checkpointer.restore_weights gives it: the eval step never reads it."""
  return dataclasses.replace(
      exp, state_shardings=exp.state_shardings.replace(opt_state=None),
      abstract_state=exp.abstract_state.replace(opt_state=None))


def evaluate_checkpoint(config, workdir: str) -> dict:
  """--mode=eval: restore a checkpoint's weights, evaluate, log, return the
  summary. The optimiser state is not read: the parameters and batch
  statistics go straight onto their shardings."""
  exp = experiment.build_experiment(config, workdir)
  checkpointer = checkpointing.Checkpointer(workdir, keep=config.checkpoint.keep)
  available = checkpointer.all_steps()
  step = config.eval.checkpoint_step
  if step == -1:
    if not available:
      raise UsageError(f'--workdir={workdir}: no checkpoint to evaluate; train first')
    step = max(available)
  elif step not in available:
    raise UsageError(f'eval.checkpoint_step={step}: no such checkpoint; '
                     f'available: {", ".join(map(str, sorted(available))) or "none"}')
  state = checkpointer.restore_weights(step, exp.abstract_state)
  checkpointer.close()
  exp = weights_only(exp)
  summary = {'step': step, **run_evaluation(exp, compile_eval_step(exp), state)}
  unreadable.UnreadableExamples(workdir, exp.dataset, process_count=jax.process_count(),
                                is_chief=jax.process_index() == 0).update()
  log = metrics_log.MetricsLog(workdir, enabled=jax.process_index() == 0)
  log.write({'split': 'eval', 'source': 'eval_mode', **summary})
  log.close()
  logging.info('Evaluated step %d: top-1 %.4f, top-5 %.4f over %d examples',
               step, summary['accuracy'], summary['top5'], summary['num_examples'])
  return summary
