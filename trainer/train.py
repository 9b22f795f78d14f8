"""The training loop: restore or create state, step, log, evaluate, checkpoint."""

import contextlib
import dataclasses
import os
import time
from typing import Callable

from absl import logging
import jax
import numpy as np

from configs import schema
from coordination import agreement as agreement_lib
from coordination import preemption
from coordination import stall_notice
from coordination import workdir_lock
from core.errors import RunFailure
from input_pipeline import folder
from trainer import checkpointing
from trainer import debug_hooks
from trainer import device_input
from trainer import engines
from trainer import evaluate
from trainer import experiment
from trainer import goodput
from trainer import input_wait
from trainer import metrics_log
from trainer import mfu
from trainer import optim
from trainer import process_spread
from trainer import profiling
from trainer import run_start
from trainer import unreadable
from trainer import wandb_tracker


class NonFiniteLoss(RunFailure):
  """The loss or the gradients of a step were not finite (nonfinite=stop)."""


# A checkpoint's metadata key: True when a stop cut the evaluation of its
# step short, so that the run resumed from it evaluates that step first.
# Absent (older checkpoints) reads as False.
EVAL_PENDING = 'eval_pending'


@dataclasses.dataclass
class TrainOutcome:
  step: int  # the step training stopped at
  preempted: bool  # stopped by a signal after a clean save
  eval_metrics: dict | None  # the last evaluation, if any


def _format_eta(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else (
      f'{seconds // 60}m{seconds % 60:02d}s')


def _prepare_workdir(exp: experiment.Experiment, workdir: str) -> None:
  """Creates the work dir, saves config.json and classes.json (process 0)."""
  if jax.process_index() != 0:
    return
  os.makedirs(workdir, exist_ok=True)
  schema.save(exp.config, workdir)
  class_map_path = os.path.join(workdir, experiment.CLASS_MAP_FILE_NAME)
  if exp.config.data.source in ('folder', 'shapes') and not os.path.exists(class_map_path):
    folder.write_class_map(class_map_path, exp.dataset.class_names)


def train_and_evaluate(config, workdir: str) -> TrainOutcome:
  """Trains to config's length, resuming from the work dir's latest checkpoint."""
  try:
    # Before anything reads or writes the work dir: one run owns it.
    with workdir_lock.hold(workdir, 'train', process_index=jax.process_index(),
                           process_count=jax.process_count()):
      return _train_and_evaluate(config, workdir)
  except KeyboardInterrupt:
    # A second Ctrl-C (preemption.StopRequest), the lock released on the way
    # here. Leaving through the interpreter would wait for the save in
    # progress, which may be the very thing the user escapes.
    kept = checkpointing.latest_step(workdir)
    process = f'process {jax.process_index()}: ' if jax.process_count() > 1 else ''
    preemption.abort_now(
        f'{process}aborted by Ctrl-C without saving; the last complete checkpoint '
        f'({"step " + str(kept) if kept is not None else "none"}) is intact: rerun '
        'the same command to resume')


def _train_and_evaluate(config, workdir: str) -> TrainOutcome:
  ledger = goodput.Ledger(goodput.process_started_at())
  # --- Mesh, data, model, optimiser: everything the config determines.
  exp = experiment.build_experiment(config, workdir)
  start = run_start.choose_start(exp, workdir)
  # --- Engine and steps: compiled (and the engine's config checked) before
  # the work dir is touched, so a config that does not fit the device memory
  # or the engine stops here with nothing written.
  with ledger.timed('compile'):
    engine = engines.create_engine(exp)
    eval_fn = evaluate.compile_eval_step(exp)
  _prepare_workdir(exp, workdir)
  is_chief = jax.process_index() == 0
  log = metrics_log.MetricsLog(
      workdir, enabled=is_chief,
      tracker=wandb_tracker.start(config, workdir) if is_chief else None)
  run_ledger = goodput.RunLedger(workdir, ledger, enabled=is_chief)
  checkpointer = checkpointing.Checkpointer(
      workdir, keep=config.checkpoint.keep, async_save=config.checkpoint.async_save,
      keep_best=config.checkpoint.keep_best)
  stop = preemption.StopRequest(config.runtime.stop_held_limit_s)
  if jax.process_count() > 1:  # a peer's stalled input ends this process too
    stall_notice.watch_for_a_peer_stall(jax.process_index())
  unreadable_examples = unreadable.UnreadableExamples(
      workdir, exp.dataset, process_count=jax.process_count(), is_chief=is_chief)
  utilization = mfu.Utilization(exp, engine)
  tracer = profiling.StepTracer(workdir, config.profile_steps, enabled=is_chief)
  outcome, error = None, None
  try:
    outcome = _train_loop(
        _Run(exp, engine, eval_fn, log, checkpointer, unreadable_examples, utilization,
             ledger, run_ledger, process_spread.Figures()),
        start, stop, tracer)
  except Exception as e:  # pylint: disable=broad-except
    error = e
  finally:
    tracer.stop()
    stop.restore_handlers()
    engine.close()
  if jax.process_count() > 1:
    stall_notice.after_loop(error, jax.process_index())
  if error is not None and jax.process_count() > 1:
    # Waiting for an in-flight save here would wait for the other processes,
    # which may be the reason for the error: leave now (a save that did not
    # finish is never taken for a checkpoint) and let them be stopped.
    raise error
  # Closing waits for the last asynchronous save, whose failure surfaces here.
  with ledger.timed('checkpoint_save'):
    try:
      checkpointer.close()
    except Exception as e:  # pylint: disable=broad-except
      error = error or e
  try:
    if ledger.loop_started:
      run = run_ledger.write()
      log.write({'step': ledger.reached_step, 'split': 'goodput', **_goodput_record(run)})
      logging.info('Run time: %s', goodput.in_words(run))
    log.close()
  except Exception as e:  # pylint: disable=broad-except
    error = error or e  # a full disk: the checkpoints' error, if any, comes first
  if error is not None:
    failure = checkpointing.disk_full_failure(error, workdir)
    if failure is not None:
      raise failure from error
    raise error
  return outcome


@dataclasses.dataclass(frozen=True)
class _Run:
  """What the loop's steps work with, built by train_and_evaluate."""
  exp: experiment.Experiment
  engine: engines.Engine
  eval_fn: Callable
  log: metrics_log.MetricsLog
  checkpointer: checkpointing.Checkpointer
  unreadable_examples: unreadable.UnreadableExamples
  utilization: mfu.Utilization
  ledger: goodput.Ledger  # this process's clock
  run_ledger: goodput.RunLedger  # goodput.json, every attempt
  spread: process_spread.Figures  # this process's figures, for the next agreement


class _Interval:
  """The steps since the last progress line: their metrics, as the engine
  hands them over, and their wall time less evaluations and saves."""

  def __init__(self, first_step: int):
    self.first_step = first_step  # the step before the interval's first
    self.records: list[dict] = []
    self.start = time.perf_counter()
    # The host blocked on its devices and peers: the metrics fetch, the
    # agreement's all-gather (trainer/process_spread.py).
    self.blocked_s = 0.0

  @contextlib.contextmanager
  def excluded(self):
    """Time spent inside is not step time."""
    began = time.perf_counter()
    yield
    self.start += time.perf_counter() - began


def _train_loop(run: _Run, start: run_start.Start, stop: preemption.StopRequest,
                tracer: profiling.StepTracer) -> TrainOutcome:
  exp, engine, config = run.exp, run.engine, run.exp.config
  start_step, meta = _start_engine(run, start)
  total = exp.total_steps
  eval_every = config.eval_every_steps or exp.steps_per_epoch
  agreement = agreement_lib.Agreement(jax.process_count(),
                                      config.runtime.agree_every_steps)
  eval_metrics, eval_pending = None, bool(meta and meta.get(EVAL_PENDING))

  # --- The evaluation a stop cut short: it runs again, on the state it was
  # meant for, before training goes on (the final one, when the checkpoint
  # is the last step's).
  if eval_pending:
    logging.info('Evaluating step %d again: a stop ended its evaluation', start_step)
    eval_metrics = _evaluate(run, start_step, _eval_stop(run, stop, agreement, start_step),
                             _stop_in_waits(stop))
    if eval_metrics is None:  # checkpoint start_step still says it is pending
      logging.warning('Stopped at step %d again, before its evaluation ended; '
                      'rerun the same command to resume.', start_step)
      return TrainOutcome(step=start_step, preempted=True, eval_metrics=None)
    # Its checkpoint is saved, and every evaluated save is a best candidate.
    run.checkpointer.save_if_best(start_step, engine.state(),
                                  _checkpoint_meta(run, start_step),
                                  _ranked_accuracy(run, eval_metrics))

  # --- Input: the stream is a pure function of (seed, step), so resuming at
  # start_step continues exactly where the interrupted run stopped.
  # It is waited for in slices (trainer/input_wait.py): a stalled pipeline
  # ends the run with its own exit code, and in a run of one process a stop
  # during the wait saves the last step as a stop between steps does (in a
  # run of several, the stop's watcher ends it: a save is a collective that
  # a peer held in the step's own would never join).
  batches = device_input.DevicePrefetcher(
      debug_hooks.stalled_stream(
          config, debug_hooks.slowed_stream(config, exp.dataset.train_batches(start_step)),
          start_step),
      engine.batch_sharding, size=config.data.prefetch_batches,
      pipeline=input_wait.pipeline_name(config),
      stall_timeout_s=config.data.stall_timeout_s,
      stop_requested=_stop_in_waits(stop))

  # --- Loop: a step, then what is due after it (progress line, evaluation,
  # the tests' hooks, the processes' agreement, a save, a stop), in that order.
  interval, last_save = _Interval(start_step), time.monotonic()
  step = start_step
  run.ledger.start_loop(step)
  run.run_ledger.write()  # an attempt that dies in its first steps still shows
  while step < total:
    tracer.before_step(step)
    try:
      batch = next(batches)
    except input_wait.StopWhileWaiting as e:
      logging.warning('The stop came while the loop waited for the %s', e)
      return _stop_after_save(run, stop, interval, step, eval_metrics)
    with tracer.annotated(step):
      engine.step(batch)
    step += 1
    run.ledger.after_step(step, batches.total_wait_s)
    stop.alive()
    tracer.after_step(step, engine.state)
    if step % config.log_every_steps == 0 or step == total:
      interval = _log_progress(run, interval, step, batches)
    evaluated = step % eval_every == 0 or step == total
    if evaluated:
      with interval.excluded(), run.ledger.timed('evaluation'):
        metrics = _evaluate(run, step, _eval_stop(run, stop, agreement, step),
                            _stop_in_waits(stop))
      if metrics is None:  # a stop, agreed between eval batches
        return _stop_after_save(run, stop, interval, step, eval_metrics, eval_pending=True)
      eval_metrics = metrics
    with run.ledger.outside_the_steps():
      debug_hooks.after_step(config, step, stop)  # the tests' failure or pause
    stop_now, save_due_by_clock = _agree(run, agreement, stop, interval, step, last_save)
    if step % config.checkpoint.every_steps == 0 or step == total or save_due_by_clock:
      with interval.excluded(), stop.in_save(), run.ledger.timed('checkpoint_save'):
        _save(run, interval, step, eval_metrics if evaluated else None)
      last_save = time.monotonic()
    if step < total and stop_now:
      return _stop_after_save(run, stop, interval, step, eval_metrics,
                              best_candidate=eval_metrics if evaluated else None)

  if start_step >= total and not eval_pending:
    logging.info('Already trained to step %d; evaluating the final state.', start_step)
    eval_metrics = _evaluate(run, step, _eval_stop(run, stop, agreement, step),
                             _stop_in_waits(stop))
    if eval_metrics is None:  # nothing to save: the checkpoint is there
      logging.warning('Stopped during the evaluation of the final step %d; '
                      'rerun the same command to evaluate it.', step)
      return TrainOutcome(step=step, preempted=True, eval_metrics=None)
  stop.saving()  # the last save ends, whatever signal comes
  with run.ledger.timed('checkpoint_save'):
    run.checkpointer.wait()
  if eval_metrics is not None:
    logging.info('Final eval at step %d: top-1 %.4f over %d examples',
                 step, eval_metrics['accuracy'], eval_metrics['num_examples'])
  return TrainOutcome(step=step, preempted=False, eval_metrics=eval_metrics)


def _start_engine(run: _Run, start: run_start.Start) -> tuple[int, dict | None]:
  """Hands the engine its initial state; returns the step it is at and the
  metadata of the checkpoint it resumed from (None: a fresh state)."""
  # Restored (resume after preemption) or created sharded; the engine owns
  # it from here on.
  exp, config = run.exp, run.exp.config
  with run.ledger.timed('restore'):
    state, meta = run_start.initial_state(exp, run.checkpointer, start)
    start_step = int(jax.device_get(state.step))
  run.run_ledger.begin(start_step)  # an earlier attempt's steps past it were lost
  run.engine.start(state, meta)  # what the engine kept in the metadata, if any
  logging.info('Mesh %s; engine %s; global batch %d; %d steps (%d per epoch); '
               'from step %d', dict(exp.mesh.shape), config.engine,
               config.batch_size, exp.total_steps, exp.steps_per_epoch, start_step)
  return start_step, meta


def _collect(run: _Run, interval: _Interval) -> None:
  """Adds the metrics of the steps since the last collect to `interval`;
  stops the run at a non-finite one (nonfinite=stop)."""
  records = run.engine.collect_metrics()
  first = interval.first_step + len(interval.records)
  interval.records.extend(records)
  if run.exp.config.nonfinite != 'stop':
    return
  bad = [first + 1 + i for i, m in enumerate(records) if not m['finite']]
  if bad:
    kept = run.checkpointer.latest_step()
    raise NonFiniteLoss(
        f'the loss or gradients became non-finite at step {bad[0]}; stopped '
        f'without saving it (last good checkpoint: '
        f'{"step " + str(kept) if kept is not None else "none"}). Lower '
        'learning_rate, set grad_clip_norm, or nonfinite=skip')


def _log_progress(run: _Run, interval: _Interval, step: int,
                  batches: device_input.DevicePrefetcher) -> _Interval:
  """Writes the train record of `interval` (ending at `step`) and its
  progress line; returns the next interval."""
  config, total = run.exp.config, run.exp.total_steps
  began = time.perf_counter()
  _collect(run, interval)  # waits for the interval's last step
  interval.blocked_s += time.perf_counter() - began
  summary = {k: float((np.max if k.endswith('_max') else np.mean)(
      [m[k] for m in interval.records])) for k in interval.records[0]}
  summary['nonfinite_steps'] = int(sum(1 - m['finite'] for m in interval.records))
  del summary['finite']
  run.unreadable_examples.update()
  steps_done = step - interval.first_step
  step_time = (time.perf_counter() - interval.start) / steps_done
  input_wait = batches.pop_wait_s() / steps_done
  run.spread.measured(step_time, input_wait, interval.blocked_s / steps_done)
  run.log.write({'step': step, 'split': 'train', **summary,
                 'images_per_sec': config.batch_size / step_time,
                 'mfu': run.utilization.of(step_time),
                 'step_time_s': step_time,
                 'input_wait_s': input_wait,
                 # distinct unreadable files so far (unreadable_files.txt)
                 'num_unreadable_files': run.unreadable_examples.count()})
  run.log.write({'step': step, 'split': 'goodput',
                 **_goodput_record(run.run_ledger.write())})
  logging.info('step %d/%d | loss %.4f | acc %.3f | %.0f img/s | MFU %.1f%% | '
               'ETA %s%s', step, total, summary['loss'], summary['accuracy'],
               config.batch_size / step_time, 100 * run.utilization.of(step_time),
               _format_eta(step_time * (total - step)),
               _time_split(summary, run.engine.step_phases))
  return _Interval(step)


def _evaluate(run: _Run, step: int, stop_agreed: Callable[[int], bool],
              stop_requested: Callable[[], bool] | None) -> dict | None:
  """Evaluates the engine's state; writes the eval record and logs it.
  None, and nothing written, when a stop ended the pass (stop_agreed, or
  stop_requested while it waited for a batch)."""
  state = run.engine.state()
  eval_metrics = evaluate.run_evaluation(run.exp, run.eval_fn, state, stop_agreed,
                                         stop_requested)
  if eval_metrics is None:
    return None
  ema = optim.ema_params(state.opt_state)
  if ema is not None:
    # The moving average beside the raw weights, with the same batch
    # statistics (optim.params_ema averages the parameters only), laid out
    # as the parameters (mesh.shard_update splits it over data).
    ema = jax.device_put(ema, run.exp.state_shardings.params)
    ema_metrics = evaluate.run_evaluation(run.exp, run.eval_fn, state.replace(params=ema),
                                          stop_agreed, stop_requested)
    if ema_metrics is None:
      return None
    eval_metrics.update({f'ema_{k}': ema_metrics[k] for k in ('accuracy', 'top5', 'loss')})
  run.unreadable_examples.update()
  run.log.write({'step': step, 'split': 'eval', **eval_metrics})
  logging.info('eval at step %d | top-1 %.4f | top-5 %.4f | loss %.4f | %d examples%s',
               step, eval_metrics['accuracy'], eval_metrics['top5'],
               eval_metrics['loss'], eval_metrics['num_examples'],
               f" | EMA top-1 {eval_metrics['ema_accuracy']:.4f}" if ema is not None else '')
  return eval_metrics


def _ranked_accuracy(run: _Run, eval_metrics: dict) -> float:
  """The top-1 that checkpoint.keep_best ranks by: eval.weights' (raw or EMA)."""
  return eval_metrics['ema_accuracy' if run.exp.config.eval.weights == 'ema' else 'accuracy']


def _eval_stop(run: _Run, stop: preemption.StopRequest,
               agreement: agreement_lib.Agreement, step: int) -> Callable[[int], bool]:
  """run_evaluation's stop_agreed for the evaluation at `step`.

  An eval batch is one SPMD program over every process's devices: a process
  that left the pass while another ran the next batch would leave that one
  waiting in its collectives for ever. So the stop is agreed as the training
  loop agrees it, with the same all-gather at the same cadence, counted in
  eval batches: every process asks before the same batches and gets the
  same answer. Not after every batch: the all-gather waits for the batches
  in flight, and every runtime.agree_every_steps batches keeps the host
  dispatching ahead, while a stop still waits no longer than that many eval
  batches (forward passes only, so shorter than as many train steps, the
  loop's own bound). One process decides alone, after every batch, for free.
  """
  pause = debug_hooks.pause_in_evaluation(run.exp.config, step, stop)

  def stop_agreed(batches_done: int) -> bool:
    if pause is not None:
      pause(batches_done)
    return agreement.due(batches_done) and agreement.decide(stop.requested(), False)[0]
  return stop_agreed


def _stop_in_waits(stop: preemption.StopRequest) -> Callable[[], bool] | None:
  """What the waits for input ask to end on a stop: the stop request in a
  run of one process; None (wait on) in a run of several, where the stop's
  watcher ends a process held in a wait."""
  return stop.requested if jax.process_count() == 1 else None


def _agree(run: _Run, agreement: agreement_lib.Agreement, stop: preemption.StopRequest,
           interval: _Interval, step: int, last_save: float) -> tuple[bool, bool]:
  """(stop now, save now because checkpoint.every_minutes passed), as every
  process decides alike; both False between agreement steps. The same
  all-gather shares the processes' figures of the last progress interval:
  a 'processes' record, and a line when one holds the run back."""
  if not agreement.due(step):
    return False, False
  config = run.exp.config
  began = time.perf_counter()
  stop_now, save_now, rows = agreement.decide_and_share(
      stop.requested(),
      config.checkpoint.every_minutes > 0 and
      time.monotonic() - last_save > 60 * config.checkpoint.every_minutes,
      run.spread.take())
  interval.blocked_s += time.perf_counter() - began  # the wait for the slowest
  if rows is not None and rows[0, 0]:  # every process measured an interval
    record = process_spread.spread(*rows[:, 1:].T)
    run.log.write({'step': step, 'split': 'processes', **record})
    words = process_spread.in_words(record)
    if words and jax.process_index() == 0:
      logging.warning('Step %d: %s', step, words)
  return stop_now, save_now


def _checkpoint_meta(run: _Run, step: int, eval_pending: bool = False) -> dict:
  # The schedule's length, so that a resume with another length can say
  # how the learning rate jumps (schedule_change_warning).
  return {'step': step, 'total_steps': run.exp.total_steps,
          'steps_per_epoch': run.exp.steps_per_epoch, EVAL_PENDING: eval_pending,
          **run.engine.checkpoint_meta()}


def _save(run: _Run, interval: _Interval, step: int, eval_metrics: dict | None = None,
          eval_pending: bool = False) -> None:
  """Starts saving the engine's state as checkpoint `step`, and as the best
  one if `eval_metrics` (this step's) beat it."""
  _collect(run, interval)
  state = run.engine.state()
  meta = _checkpoint_meta(run, step, eval_pending)
  run.checkpointer.save(step, state, meta)
  if eval_metrics is not None:
    run.checkpointer.save_if_best(step, state, meta, _ranked_accuracy(run, eval_metrics))
  run.ledger.saved(step)


def _stop_after_save(run: _Run, stop: preemption.StopRequest, interval: _Interval,
                     step: int, eval_metrics: dict | None,
                     best_candidate: dict | None = None,
                     eval_pending: bool = False) -> TrainOutcome:
  """Saves checkpoint `step` (unless saved already), waits for it; the
  outcome of a stop. eval_pending: a stop cut this step's evaluation short,
  so no result of it is kept and the resumed run evaluates it first."""
  stop.saving()  # the stop's watcher leaves the save to finish
  with run.ledger.timed('checkpoint_save'):
    _save(run, interval, step, best_candidate, eval_pending)
    run.checkpointer.wait()
  logging.warning('Stopped at step %d after saving%s; rerun the same command to '
                  'resume.', step, ' (its evaluation runs again on resume)'
                  if eval_pending else '')
  return TrainOutcome(step=step, preempted=True, eval_metrics=eval_metrics)


def _goodput_record(run: dict) -> dict:
  """metrics.jsonl's goodput record of the run so far (trainer/goodput.py):
  its goodput, wall time and each part in seconds."""
  return {'goodput': run['goodput'], 'wall_s': run['wall_s'], 'attempts': run['attempts'],
          'redone_steps': run['redone_steps'],
          **{f'{name}_s': seconds for name, seconds in run['parts'].items()}}


def _time_split(summary: dict, phases: tuple[str, ...]) -> str:
  """' | compute 61% push 20% ...' for engines that time their phases."""
  parts = [k for k in phases if k in summary]
  total = sum(summary[k] for k in parts)
  if not parts or total <= 0:
    return ''
  return ' | ' + ' '.join(f'{k[:-2]} {100 * summary[k] / total:.0f}%' for k in parts)
