"""--mode=eval: choose a checkpoint, restore its weights, evaluate, print the summary.

The pass itself is the training loop's (trainer/evaluate.py). --mode=predict
and --mode=export choose and restore their checkpoint the same way.
"""

import dataclasses
import json
import os

from absl import logging

from configs import values
from coordination import agreement
from coordination import preemption
from core.errors import UsageError
from trainer import checkpointing
from trainer import debug_hooks
from trainer import evaluate
from trainer import experiment


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
  choice = values.eval_checkpoint(config.eval.checkpoint)
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
  metrics = evaluate.run_evaluation(exp, evaluate.compile_checked_eval_step(exp), state,
                                    debug_hooks.pause_in_evaluation(config, step))
  summary = {'step': step, 'weights': config.eval.weights, **metrics}
  if summary['num_unreadable']:
    # Named here, not in unreadable_files.txt: eval writes nothing there.
    names = sorted(set().union(*exp.dataset.unreadable_examples().values()))
    logging.warning('%d unreadable examples left out of the evaluation%s',
                    summary['num_unreadable'],
                    f', e.g. {", ".join(names[:5])}' if names else '')
  logging.info('Evaluated step %d: top-1 %.4f, top-5 %.4f over %d examples',
               step, summary['accuracy'], summary['top5'], summary['num_examples'])
  return summary
