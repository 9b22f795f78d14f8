"""The training loop: restore or create state, step, log, evaluate, checkpoint."""

import dataclasses
import errno
import functools
import os
import time

from absl import logging
import jax
import numpy as np

from cli import config_loader
from cli.errors import RunFailure
from input_pipeline import folder
from trainer import checkpointing
from trainer import device_input
from trainer import evaluate
from trainer import init_from
from trainer import memory
from trainer import metrics_log
from trainer import preemption
from trainer import setup
from trainer import state as state_lib
from trainer import steps


class NonFiniteLoss(RunFailure):
  """The loss or the gradients of a step were not finite (nonfinite=stop)."""


@dataclasses.dataclass
class TrainOutcome:
  step: int  # the step training stopped at
  preempted: bool  # stopped by a signal after a clean save
  eval_metrics: dict | None  # the last evaluation, if any


def compile_train_step(exp: setup.Experiment):
  """The train step, compiled before the loop so its memory use is known."""
  fn = jax.jit(
      functools.partial(steps.train_step, model=exp.model, tx=exp.tx,
                        learning_rate_fn=exp.learning_rate_fn,
                        label_smoothing=exp.config.label_smoothing,
                        mixup_alpha=exp.config.mixup_alpha,
                        grad_accum_steps=exp.config.grad_accum_steps,
                        seed=exp.config.seed,
                        skip_nonfinite=exp.config.nonfinite == 'skip',
                        nan_at_step=exp.config.debug.nan_at_step),
      in_shardings=(exp.state_shardings, exp.batch_sharding),
      out_shardings=(exp.state_shardings, None),
      donate_argnums=0)
  size = exp.config.data.image_size
  batch_spec = {
      'image': jax.ShapeDtypeStruct((exp.config.batch_size, size, size, 3),
                                    np.uint8, sharding=exp.batch_sharding),
      'label': jax.ShapeDtypeStruct((exp.config.batch_size,), np.int32,
                                    sharding=exp.batch_sharding),
  }
  start = time.perf_counter()
  with exp.tracing_context():
    compiled = fn.lower(exp.abstract_state, batch_spec).compile()
  usage = memory.report(compiled, exp.abstract_state)
  logging.info('Compiled the train step in %.1fs; memory %s',
               time.perf_counter() - start, usage.describe())
  memory.check_fits(usage, memory.device_capacity(exp.config.runtime.device_memory_gib))
  return compiled


def _format_eta(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else (
      f'{seconds // 60}m{seconds % 60:02d}s')


def _prepare_workdir(exp: setup.Experiment, workdir: str) -> None:
  """Creates the work dir, saves config.json and classes.json (process 0)."""
  if jax.process_index() != 0:
    return
  os.makedirs(workdir, exist_ok=True)
  config_loader.save(exp.config, workdir)
  class_map_path = os.path.join(workdir, setup.CLASS_MAP_FILE_NAME)
  if exp.config.data.source in ('folder', 'shapes') and not os.path.exists(class_map_path):
    folder.write_class_map(class_map_path, exp.dataset.class_names)


def _initial_state(exp: setup.Experiment, checkpointer: checkpointing.Checkpointer):
  """The latest checkpoint's state if there is one, else a fresh state."""
  latest = checkpointer.latest_step()
  if latest is not None:
    state, _ = checkpointer.restore(latest, exp.abstract_state)
    logging.info('Resuming from step %d', latest)
    return state
  state = state_lib.create_train_state(exp.model, exp.tx, exp.config.data.image_size,
                                       exp.state_shardings, exp.config.seed)
  if exp.config.init.from_workdir:
    state = init_from.initialize_from(state, exp.config.init)
  logging.info('Initialised %s: %s parameters', exp.config.model.name,
               f'{state_lib.count_params(state.params):,}')
  return state


def train_and_evaluate(config, workdir: str) -> TrainOutcome:
  """Trains to config's length, resuming from the work dir's latest checkpoint."""
  # --- Mesh, data, model, optimiser: everything the config determines.
  exp = setup.build_experiment(config, workdir)
  # --- Steps: compiled before the work dir is touched, so a config that
  # does not fit the device memory stops here with nothing written.
  train_fn = compile_train_step(exp)
  eval_fn = evaluate.compile_eval_step(exp)
  if config.init.from_workdir:
    init_from.check(exp.abstract_state, config.init)
  _prepare_workdir(exp, workdir)
  is_chief = jax.process_index() == 0
  log = metrics_log.MetricsLog(workdir, enabled=is_chief)
  checkpointer = checkpointing.Checkpointer(
      workdir, keep=config.checkpoint.keep, async_save=config.checkpoint.async_save,
      keep_best=config.checkpoint.keep_best)
  stop = preemption.StopRequest()
  outcome, error = None, None
  try:
    outcome = _train_loop(exp, train_fn, eval_fn, log, checkpointer, stop)
  except Exception as e:  # pylint: disable=broad-except
    error = e
  finally:
    stop.restore_handlers()
  # Closing waits for the last asynchronous save, whose failure surfaces here.
  for close in (checkpointer.close, log.close):
    try:
      close()
    except Exception as e:  # pylint: disable=broad-except
      error = error or e
  if error is not None:
    if _is_disk_full(error):
      kept = checkpointing.Checkpointer(workdir, keep=config.checkpoint.keep).latest_step()
      raise RunFailure(
          f'disk full while writing to {workdir} ({_disk_full_cause(error)}); the '
          f'last complete checkpoint (step {kept}) is intact: free space and '
          'rerun the same command to resume') from error
    raise error
  return outcome


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _causes(error: BaseException):
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def _is_disk_full(error: BaseException) -> bool:
  return any(isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS
             or 'No space left on device' in str(e) for e in _causes(error))


def _disk_full_cause(error: BaseException) -> str:
  for e in _causes(error):
    if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
      return e.strerror or str(e)
  return 'No space left on device'


def _train_loop(exp, train_fn, eval_fn, log, checkpointer, stop) -> TrainOutcome:
  config = exp.config
  # --- State: restored (resume after preemption) or created sharded.
  state = _initial_state(exp, checkpointer)
  start_step = int(jax.device_get(state.step))
  total = exp.total_steps
  eval_every = config.eval_every_steps or exp.steps_per_epoch
  logging.info('Mesh %s; global batch %d; %d steps (%d per epoch); from step %d',
               dict(exp.mesh.shape), config.batch_size, total,
               exp.steps_per_epoch, start_step)

  def check_finite(pending, first_step):
    """Raises NonFiniteLoss naming the first bad step among `pending`."""
    if config.nonfinite != 'stop' or not pending:
      return
    flags = jax.device_get([m['finite'] for m in pending])
    bad = [first_step + 1 + i for i, ok in enumerate(flags) if not ok]
    if bad:
      kept = checkpointer.latest_step()
      raise NonFiniteLoss(
          f'the loss or gradients became non-finite at step {bad[0]}; stopped '
          f'without saving it (last good checkpoint: '
          f'{"step " + str(kept) if kept is not None else "none"}). Lower '
          'learning_rate, set grad_clip_norm, or nonfinite=skip')

  def save(step, eval_metrics=None):
    check_finite(pending, interval_first)
    meta = {'step': step, 'data_position': step}
    checkpointer.save(step, state, meta)
    if eval_metrics is not None:
      checkpointer.save_if_best(step, state, meta, eval_metrics['accuracy'])

  # --- Input: the stream is a pure function of (seed, step), so resuming at
  # start_step continues exactly where the interrupted run stopped.
  batches = device_input.DevicePrefetcher(
      exp.dataset.train_batches(start_step), exp.batch_sharding,
      size=config.data.prefetch_batches)

  # --- Loop.
  eval_metrics, pending, last_save = None, [], time.monotonic()
  interval_start, interval_first = time.perf_counter(), start_step
  step = start_step
  while step < total:
    state, metrics = train_fn(state, next(batches))
    pending.append(metrics)
    step += 1

    if step % config.log_every_steps == 0 or step == total:
      check_finite(pending, interval_first)
      fetched = jax.device_get(pending)
      summary = {k: float(np.mean([m[k] for m in fetched])) for k in pending[0]}
      summary['nonfinite_steps'] = int(sum(1 - m.pop('finite') for m in fetched))
      del summary['finite']
      elapsed = time.perf_counter() - interval_start
      steps_done = step - interval_first
      step_time = elapsed / steps_done
      log.write({'step': step, 'split': 'train', **summary,
                 'images_per_sec': config.batch_size / step_time,
                 'step_time_s': step_time,
                 'input_wait_s': batches.pop_wait_s() / steps_done,
                 # unreadable training images so far (this process's reads)
                 'num_skipped': exp.dataset.skipped_counts()['train']})
      logging.info('step %d/%d | loss %.4f | acc %.3f | %.0f img/s | ETA %s',
                   step, total, summary['loss'], summary['accuracy'],
                   config.batch_size / step_time,
                   _format_eta(step_time * (total - step)))
      pending, interval_start, interval_first = [], time.perf_counter(), step

    if step % eval_every == 0 or step == total:
      eval_start = time.perf_counter()
      eval_metrics = evaluate.run_evaluation(exp, eval_fn, state)
      log.write({'step': step, 'split': 'eval', **eval_metrics})
      logging.info('eval at step %d | top-1 %.4f | top-5 %.4f | loss %.4f | %d examples',
                   step, eval_metrics['accuracy'], eval_metrics['top5'],
                   eval_metrics['loss'], eval_metrics['num_examples'])
      interval_start += time.perf_counter() - eval_start  # not step time

    due_minutes = (config.checkpoint.every_minutes > 0 and
                   time.monotonic() - last_save > 60 * config.checkpoint.every_minutes)
    if step % config.checkpoint.every_steps == 0 or step == total or due_minutes:
      save_start = time.perf_counter()
      save(step, eval_metrics if step % eval_every == 0 or step == total else None)
      last_save = time.monotonic()
      interval_start += time.perf_counter() - save_start  # not step time

    if step < total and stop.requested(jax.process_count()):
      save(step)
      checkpointer.wait()
      logging.warning('Stopped at step %d after saving; rerun the same command '
                      'to resume.', step)
      return TrainOutcome(step=step, preempted=True, eval_metrics=eval_metrics)

  if start_step >= total:
    logging.info('Already trained to step %d; evaluating the final state.', start_step)
    eval_metrics = evaluate.run_evaluation(exp, eval_fn, state)
    log.write({'step': step, 'split': 'eval', **eval_metrics})
  checkpointer.wait()
  if eval_metrics is not None:
    logging.info('Final eval at step %d: top-1 %.4f over %d examples',
                 step, eval_metrics['accuracy'], eval_metrics['num_examples'])
  return TrainOutcome(step=step, preempted=False, eval_metrics=eval_metrics)
