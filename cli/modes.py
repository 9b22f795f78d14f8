"""--mode: what each mode checks before the runtime starts, and what it runs.

main.run looks the mode up in MODES and follows its entry; a new mode is one
entry here (and its package). Each `run` takes (config, workdir, context)
and returns the exit code; the packages are imported on use, so a mode loads
only what it needs.
"""

import dataclasses
import json
from typing import Callable

from core.errors import EXIT_PREEMPTED


@dataclasses.dataclass(frozen=True)
class Context:
  """What a mode may need besides the config and the work dir."""
  multi_process_job: bool  # more than one process, launched or scheduled


@dataclasses.dataclass(frozen=True)
class Mode:
  run: Callable  # (config, workdir, Context) -> exit code
  # Which data it reads, checked before anything starts: 'train' (the
  # training data and the evaluation data), 'eval' (the evaluation data
  # only), 'prepare' (the training data's location; the evaluation data is
  # what it prepares) or '' (none: synthetic data of the configured shapes,
  # or images named by the mode's own keys).
  data: str = ''
  needs_trained_workdir: bool = False  # reads a checkpoint of a past run
  warns_unused_engine_keys: bool = False  # runs the configured engine
  before_runtime: bool = False  # one process, no devices (prepare)
  # The run's batch_size over the devices: checked unless the mode chooses
  # its own batches, workers and meshes (and checks each of them).
  checks_batch: bool = True
  # Runs on glibc's default malloc instead of main.py's tunables
  # (cli/runtime.py). The study compares the planner's samples of the
  # workers' programs with the engines' steps: under the tunables, which
  # large buffers a run gets back as fresh memory (pages the kernel faults
  # in again) depends on the allocator's state, so the two pay different
  # kernel time; under the defaults every large buffer is fresh in every
  # run, the same for both (docs/study.md).
  glibc_malloc_defaults: bool = False


def _print_json(record: dict) -> int:
  print(json.dumps(record), flush=True)
  return 0


def _train(config, workdir, context) -> int:
  del context
  import jax  # pylint: disable=g-import-not-at-top
  from trainer import train  # pylint: disable=g-import-not-at-top
  outcome = train.train_and_evaluate(config, workdir)
  if outcome.preempted:  # a stop's grace period is for the save, not for plots
    return EXIT_PREEMPTED
  if config.metrics.plots_at_end and jax.process_index() == 0:
    _draw_at_end(workdir)
  return 0


def _draw_at_end(workdir: str) -> None:
  """--mode=report's plots of a finished run; a failure to draw is a
  warning: the run itself succeeded."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  from modes import report  # pylint: disable=g-import-not-at-top
  try:
    plots = report.run_report(workdir)['plots']
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('The plots of the run were not drawn (%s); try: main.py '
                    '--mode=report --workdir=%s', e, workdir)
    return
  logging.info('Plots of the run: %s', ', '.join(plots))


def _eval(config, workdir, context) -> int:
  del context
  from modes import eval as eval_mode  # pylint: disable=g-import-not-at-top
  print(eval_mode.summary_json(eval_mode.evaluate_checkpoint(config, workdir)), flush=True)
  return 0


def _predict(config, workdir, context) -> int:
  del context
  from modes import predict  # pylint: disable=g-import-not-at-top
  predict.run_predict(config, workdir)
  return 0


def _export(config, workdir, context) -> int:
  del context
  from modes import export  # pylint: disable=g-import-not-at-top
  return _print_json(export.run_export(config, workdir))


def _report(config, workdir, context) -> int:
  del config, context
  from modes import report  # pylint: disable=g-import-not-at-top
  return _print_json(report.run_report(workdir))


def _bench(config, workdir, context) -> int:
  del context
  from modes import bench  # pylint: disable=g-import-not-at-top
  return _print_json(bench.run_bench(config, workdir))


def _plan(config, workdir, context) -> int:
  del context
  from planner import plan  # pylint: disable=g-import-not-at-top
  plan.run_plan(config, workdir)
  return 0


def _study(config, workdir, context) -> int:
  del context
  from cli import validation  # pylint: disable=g-import-not-at-top
  from planner import study  # pylint: disable=g-import-not-at-top
  return _print_json(study.run_study(config, workdir, validation.check_study_cell))


def _probe(config, workdir, context) -> int:
  del context
  from probe import run as probe_run  # pylint: disable=g-import-not-at-top
  probe_run.run_probe(config, workdir)
  return 0


def _prepare(config, workdir, context) -> int:
  del workdir
  from trainer import eval_data  # pylint: disable=g-import-not-at-top
  from input_pipeline import prepare  # pylint: disable=g-import-not-at-top
  evaluation = eval_data.eval_data_config(config)
  for data in (config.data, evaluation):
    if data is not None:  # the second: evaluation data that eval.* names
      print(prepare.prepare_data(data, seed=config.seed,
                                 multi_process=context.multi_process_job,
                                 eval_only=data is not config.data), flush=True)
  return 0


def _check_probe_keys(config, num_processes: int) -> None:
  del num_processes
  from probe import settings  # pylint: disable=g-import-not-at-top
  settings.check_config(config)


def _check_plan(config, num_processes: int) -> None:
  # planner/checks.py alone: the planner's other modules start a JAX backend
  # when imported, which must wait for the runtime's start.
  from planner import checks  # pylint: disable=g-import-not-at-top
  checks.check_plan_mode(config)
  if not config.plan.probe:
    checks.check_one_process('plan', num_processes)


def _check_study(config, num_processes: int) -> None:
  from planner import checks  # pylint: disable=g-import-not-at-top
  checks.check_one_process('study', num_processes)


MODES = {
    'train': Mode(_train, data='train', warns_unused_engine_keys=True),
    'eval': Mode(_eval, data='eval', needs_trained_workdir=True),
    'predict': Mode(_predict, needs_trained_workdir=True),
    'export': Mode(_export, needs_trained_workdir=True),
    'bench': Mode(_bench, warns_unused_engine_keys=True),
    'plan': Mode(_plan, checks_batch=False),
    'study': Mode(_study, checks_batch=False, glibc_malloc_defaults=True),
    'probe': Mode(_probe, checks_batch=False),
    'prepare': Mode(_prepare, data='prepare', before_runtime=True),
    'report': Mode(_report, needs_trained_workdir=True, before_runtime=True,
                   checks_batch=False),
}

# Checks of a mode's own config section, before the runtime starts:
# (config, the processes main.py was told of) -> None or UsageError.
MODE_CHECKS = {'probe': _check_probe_keys, 'plan': _check_plan, 'study': _check_study}


def on_glibc_malloc_defaults(name: str | None) -> bool:
  """Whether --mode=name runs on glibc's default malloc (None: the default
  mode, train; an unknown name: no, absl rejects it later)."""
  mode = MODES.get(name or 'train')
  return mode is not None and mode.glibc_malloc_defaults
