"""Evaluation: the compiled eval step, a full pass, and --mode=eval."""

import dataclasses
import functools
import json
import os
import time
from typing import Callable

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from core.errors import UsageError
from trainer import agreement
from trainer import checkpointing
from trainer import device_input
from trainer import experiment
from trainer import preemption
from trainer import progress
from trainer import step_functions
from trainer import validation

_PROGRESS_EVERY_S = 30.0


def compile_eval_step(exp: experiment.Experiment):
  """The eval step compiled for the state's layout and one eval batch."""
  fn = jax.jit(functools.partial(step_functions.eval_step, model=exp.model),
               in_shardings=(exp.state_shardings, exp.batch_sharding))
  return fn


def run_evaluation(exp: experiment.Experiment, eval_fn, state,
                   stop_agreed: Callable[[int], bool] | None = None) -> dict | None:
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
  """
  batches = device_input.DevicePrefetcher(
      exp.dataset.eval_batches(), exp.batch_sharding,
      size=exp.config.data.prefetch_batches)
  totals = None
  # ImageNet's 50,000 images take minutes: a line now and then says how far.
  started, every = time.monotonic(), progress.Every(_PROGRESS_EVERY_S)
  total = exp.dataset.num_eval_batches
  with exp.tracing_context():
    if stop_agreed is not None and stop_agreed(0):
      return _stopped(0, total)
    for done, batch in enumerate(batches, start=1):
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


def summary_json(summary: dict) -> str:
  keys = ('step', 'weights', 'accuracy', 'top5', 'loss', 'num_examples')
  return json.dumps({k: summary[k] for k in keys})


def weights_only(exp: experiment.Experiment) -> experiment.Experiment:
  """`exp` for a state without optimiser state (opt_state=None), as
  checkpointing.restore_weights gives it: the eval step never reads it."""
  return dataclasses.replace(
      exp, state_shardings=exp.state_shardings.replace(opt_state=None),
      abstract_state=exp.abstract_state.replace(opt_state=None))


def choose_checkpoint(workdir: str, choice: str | int, latest_steps: list[int]) -> tuple[str, int]:
  """(directory, step) of eval.checkpoint's choice: 'latest', 'best' or a step.

  A step is looked up among the latest checkpoints, then in checkpoints_best/.
  """
  best_steps = checkpointing.best_steps(workdir)
  latest_dir = os.path.join(workdir, checkpointing.LATEST_DIR)
  best_dir = os.path.join(workdir, checkpointing.BEST_DIR)
  if choice == 'latest':
    if not latest_steps:
      raise UsageError(f'--workdir={workdir}: no checkpoint to evaluate; train first')
    return latest_dir, max(latest_steps)
  if choice == 'best':
    if not best_steps:
      raise UsageError(f'eval.checkpoint=best: {best_dir} holds no checkpoint; train '
                       'with checkpoint.keep_best=true, or evaluate latest or a step')
    return best_dir, best_steps[-1]
  if choice in latest_steps:
    return latest_dir, choice
  if choice in best_steps:
    return best_dir, choice
  available = sorted(set(latest_steps) | set(best_steps))
  raise UsageError(f'eval.checkpoint={choice}: no such checkpoint; available: '
                   f'{", ".join(map(str, available)) or "none"}')


def restore_chosen_weights(config, directory: str, step: int, abstract_state):
  """Checkpoint `step`'s weights as eval.weights says: its parameters, or
  their moving average in their place; batch statistics either way, and no
  optimiser state."""
  state = checkpointing.restore_weights(directory, step, abstract_state)
  if config.eval.weights == 'ema':
    state = state.replace(params=checkpointing.restore_ema(
        directory, step, abstract_state.opt_state, abstract_state.params))
  return state


def evaluate_checkpoint(config, workdir: str) -> dict:
  """--mode=eval: restore a checkpoint's weights, evaluate, return the
  summary. The optimiser state is not read: the parameters and batch
  statistics go straight onto their shardings. Nothing is written into the
  work dir, so it may run beside the training that owns it."""
  choice = validation.eval_checkpoint(config.eval.checkpoint)
  directory, step = choose_checkpoint(workdir, choice, checkpointing.all_steps(workdir))
  exp = experiment.build_experiment(config, workdir, eval_only=True)
  agreement.check_same_run(config, num_eval_examples=exp.dataset.num_eval_examples,
                           eval_checkpoint=f'{os.path.basename(directory)}/{step}')
  state = restore_chosen_weights(config, directory, step, exp.abstract_state)
  exp = weights_only(exp)
  # A stop signal ends this process at once, with exit 75 (main.py), as in
  # start-up: it has written nothing, so there is nothing to agree on. The
  # launcher (or the cluster's) signals every process; one stopped alone
  # leaves its peers waiting in a collective until launch.py stops them
  # too (cli/launcher.py).
  preemption.during_evaluation(step)
  summary = {'step': step, 'weights': config.eval.weights, **run_evaluation(exp, compile_eval_step(exp), state,
                                            _debug_pause(config, step))}
  if summary['num_unreadable']:
    # Named here, not in unreadable_files.txt: eval writes nothing there.
    names = sorted(set().union(*exp.dataset.unreadable_examples().values()))
    logging.warning('%d unreadable examples left out of the evaluation%s',
                    summary['num_unreadable'],
                    f', e.g. {", ".join(names[:5])}' if names else '')
  logging.info('Evaluated step %d: top-1 %.4f, top-5 %.4f over %d examples',
               step, summary['accuracy'], summary['top5'], summary['num_examples'])
  return summary


def _debug_pause(config, step: int) -> Callable[[int], bool] | None:
  """debug.pause_at_step=STEP in --mode=eval: the tests' way to signal an
  evaluation mid-pass. After the first batch of checkpoint STEP's pass, it
  waits for the stop signal, which ends the process (main.py)."""
  if config.debug.pause_at_step != step:
    return None

  def pause(batches_done: int) -> bool:
    if batches_done == 1:
      logging.warning('Paused at step %d in its evaluation, after batch 1 '
                      '(debug.pause_at_step) until a stop signal', step)
      while True:
        time.sleep(0.01)
    return False
  return pause
