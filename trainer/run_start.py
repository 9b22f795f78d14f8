"""Where a training run starts: the checkpoint to resume from, or a fresh
(or fine-tuned) state, agreed by every process before anything is compiled
or written; and what a resume with another schedule length must be told."""

import dataclasses

from absl import logging

from configs import schema
from coordination import agreement as agreement_lib
from trainer import checkpointing
from trainer import experiment
from trainer import init_from
from trainer import init_weights
from trainer import optim
from trainer import state as state_lib


@dataclasses.dataclass(frozen=True)
class Start:
  """Where training starts, as every process agreed (choose_start)."""
  resume_step: int | None  # the checkpoint to resume from; None: a fresh state
  init_step: int | None  # init.from_workdir's checkpoint for a fresh state; None: none
  # (steps per epoch, total steps) of the saved config, for checkpoints whose
  # metadata predates recording them; None: no saved config.
  saved_length: tuple[int, int] | None
  # init.from_weights's arrays for a fresh state, by parameter path; None: none.
  weights: dict | None = None


def choose_start(exp: experiment.Experiment, workdir: str) -> Start:
  """Where this run starts, checked to be the same on every process before
  anything is compiled or written (coordination/agreement.py)."""
  config = exp.config
  resume_step = checkpointing.latest_step(workdir)
  # init.* says how a run starts: once the work dir has a checkpoint, the
  # source is neither read nor needed (it may be gone).
  init_step = (init_from.check(exp.abstract_state, config.init)
               if config.init.from_workdir and resume_step is None else None)
  # Read and checked whole before anything is compiled or written.
  weights = (init_weights.load(exp.abstract_state, config)
             if config.init.from_weights and resume_step is None else None)
  agreement_lib.check_same_run(
      config, num_train_examples=exp.dataset.num_train_examples,
      num_eval_examples=exp.dataset.num_eval_examples, total_steps=exp.total_steps,
      resume_step=resume_step, init_step=init_step)
  saved = schema.load_saved(workdir)  # before this run's replaces it
  saved_length = (experiment.training_length(saved, exp.dataset.num_train_examples)
                  if saved is not None else None)
  return Start(resume_step, init_step, saved_length, weights)


def initial_state(exp: experiment.Experiment, checkpointer: checkpointing.Checkpointer,
                   start: Start):
  """(state, checkpoint metadata): the checkpoint to resume from if there is
  one, else a fresh state (initialised from init.from_workdir's checkpoint
  if set) and None."""
  latest, saved_length = start.resume_step, start.saved_length
  if latest is not None:
    state, meta = checkpointer.restore(latest, exp.abstract_state)
    logging.info('Resuming from step %d', latest)
    if 'total_steps' in meta:
      saved_length = (meta['steps_per_epoch'], meta['total_steps'])
    if saved_length is not None:
      warning = schedule_change_warning(exp.config, latest, saved_length,
                                        (exp.steps_per_epoch, exp.total_steps))
      if warning:
        logging.warning('%s', warning)
    return state, meta
  state = state_lib.create_train_state(exp.model, exp.tx, exp.config.data.image_size,
                                       exp.state_shardings, exp.config.seed)
  if start.init_step is not None:
    state = init_from.initialize_from(state, exp.config.init, start.init_step)
  if start.weights is not None:
    state = init_weights.initialize_from(state, start.weights)
    start.weights.clear()  # the host's copy, no longer needed
  logging.info('Initialised %s: %s parameters', exp.config.model.name,
               f'{state_lib.count_params(state.params):,}')
  return state, None


def schedule_change_warning(config, step: int, old_length: tuple[int, int],
                            new_length: tuple[int, int]) -> str | None:
  """What a resumed run must be told when its schedule changed length.

  The cosine schedule is a function of the training length, so changing
  num_train_steps or num_epochs (or the data's size, with num_epochs) on
  resume rebuilds it: at the resume step the rate jumps. Lengths are
  (steps per epoch, total steps). None when the rate at `step` is the same.
  """
  if tuple(old_length) == tuple(new_length):
    return None
  old_rate = float(optim.create_learning_rate_fn(config, *old_length)(step))
  new_rate = float(optim.create_learning_rate_fn(config, *new_length)(step))
  if old_rate == new_rate:
    return None
  return (f'the training length changed on resume ({old_length[1]} -> '
          f'{new_length[1]} steps), so the learning-rate schedule is rebuilt '
          f'over the new length: at step {step} the rate jumps from '
          f'{old_rate:.6g} to {new_rate:.6g}')
