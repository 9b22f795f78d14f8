"""Trains, evaluates, benchmarks or plans an image model.

  main.py --config=configs/RECIPE.py --workdir=DIR [--mode=MODE] [--config.KEY=VALUE ...]
  main.py --config=configs/RECIPE.py [--config.KEY=VALUE ...] --print_config
  main.py --list=models|recipes

Modes: train (the default; rerun the same command to resume), eval (restore a
checkpoint and evaluate), predict (classify image files with a checkpoint),
export (a checkpoint as a TensorFlow SavedModel), bench (time the train
step), plan and study (the cluster planner), probe (measure the real
network and devices into probe.json), prepare (prepare the data once, before
a multi-host job), report (plots of a run from its work dir's files). README.md is the
guide; docs/configuration.md lists every config key.
"""

# This file only parses flags, starts the runtime and dispatches (the modes'
# table is cli/modes.py): all logic lives in the packages.

import os
import sys

# Quiet TensorFlow's C++ start-up chatter before anything imports it.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from cli import modes  # pylint: disable=g-import-not-at-top
from cli import runtime  # pylint: disable=g-import-not-at-top

if __name__ == '__main__':
  # Before anything allocates much, under the malloc setting of the mode.
  runtime.restart_with_malloc_tunables(glibc_defaults=modes.on_glibc_malloc_defaults(
      runtime.command_line_mode(sys.argv)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

from cli import config_loader
from cli import describe
from cli import flags_parser
from cli import logs
from cli import validation
from configs import schema
from coordination import preemption
from core import exit as exit_lib
from core.errors import EXIT_ABORTED, EXIT_FAILURE, EXIT_INPUT_STALLED, EXIT_PREEMPTED
from core.errors import EXIT_USAGE, InputStalled, RunFailure, UsageError
from input_pipeline import check_data_config, DataError
from trainer import eval_data

FLAGS = flags_parser.FLAGS
# --help lists the flags of cli/flags_parser.py as this program's own.
flags.adopt_module_key_flags(flags_parser)
DEFAULT_RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              'configs', 'quickstart.py')


def _fail_usage(error: Exception) -> None:
  print(f'error: {error}', file=sys.stderr)
  sys.exit(EXIT_USAGE)


def parse_flags(argv):
  try:
    return flags_parser.parse(argv)
  except UsageError as e:
    _fail_usage(e)


def run(argv) -> int:
  """Everything after flag parsing; returns the exit code."""
  del argv
  parsed = flags_parser.PARSED
  if FLAGS.list:
    _print_listing(describe.models_text() if FLAGS.list == 'models' else describe.recipes_text())
    return 0
  config = config_loader.build_config(parsed.recipe_path, parsed.overrides,
                                      FLAGS.workdir, DEFAULT_RECIPE)
  validation.check_config(config)
  if FLAGS.print_config:
    _print_listing(describe.config_text(config))
    return 0
  mode = modes.MODES[FLAGS.mode]
  _check_before_start(mode, config)
  context = modes.Context(multi_process_job=(
      FLAGS.num_processes > 1 or runtime.detect_cluster(config.runtime.cluster) is not None))
  if mode.before_runtime:  # one process, no devices
    return mode.run(config, FLAGS.workdir, context)

  # A mesh plan compiles for every device of the cluster: on a CPU, emulate them.
  mesh_plan = FLAGS.mode == 'plan' and config.plan.parallelism == 'mesh'
  view = runtime.initialize(num_cpu_devices=config.runtime.num_cpu_devices or (
                                _mesh_plan_devices(config) if mesh_plan else 0),
                     coordinator_address=FLAGS.coordinator_address,
                     num_processes=FLAGS.num_processes,
                     process_id=FLAGS.process_id,
                     cluster=config.runtime.cluster,
                     init_timeout_s=config.runtime.init_timeout_s,
                     heartbeat_timeout_s=config.runtime.heartbeat_timeout_s,
                     compilation_cache_dir=config.runtime.compilation_cache_dir,
                     cpu_xnnpack=config.runtime.cpu_xnnpack,
                     gpu_defaults=config.runtime.gpu_defaults)
  devices_line = runtime.check_devices(view)
  import jax  # pylint: disable=g-import-not-at-top
  if mode.checks_batch:
    validation.check_against_devices(config, num_devices=jax.device_count(),
                                     num_processes=jax.process_count())
  if jax.process_count() > 1 or jax.default_backend() != 'cpu':
    # Which host drives which devices: what a cluster's operator checks
    # first (a single CPU process has nothing to tell).
    logging.info('%s', devices_line)
  return mode.run(config, FLAGS.workdir, context)


def _mesh_plan_devices(config) -> int:
  """The devices a mesh plan compiles for, on this process: plan.num_workers,
  else the probed cluster's (plan.probe), else every device at hand (0);
  one process's share of them in a job of several."""
  # pylint: disable-next=g-import-not-at-top
  from planner import from_probe  # reads JSON only: no backend starts
  provenance = (from_probe.load(config.plan.probe)['provenance']
                if config.plan.probe and not config.plan.num_workers else None)
  return from_probe.devices_to_emulate(
      provenance, config.plan.num_workers,
      runtime.job_processes(FLAGS.num_processes, config.runtime.cluster))


def _check_before_start(mode: modes.Mode, config) -> None:
  """What the mode needs of the config, the data and the work dir, checked
  before the runtime starts (cli/modes.py says what each mode needs)."""
  ignored = validation.ignored_engine_keys(config) if mode.warns_unused_engine_keys else []
  if ignored:
    # Not an error: a PS run's work dir keeps its ps.* keys when it goes
    # on under another engine.
    logging.warning('engine=%s: %s set, but this engine does not use them',
                    config.engine, ', '.join(ignored))
  if FLAGS.mode in modes.MODE_CHECKS:
    modes.MODE_CHECKS[FLAGS.mode](config, FLAGS.num_processes)
  if mode.data:
    # Evaluation data that eval.* names (None: the training data's own split).
    evaluation = eval_data.eval_data_config(config)
    if mode.data in ('train', 'prepare') or evaluation is None:
      check_data_config(config.data)
    if evaluation is not None and mode.data != 'prepare':
      check_data_config(evaluation)
  if mode.needs_trained_workdir and schema.load_saved(FLAGS.workdir) is None:
    raise UsageError(f'--workdir={FLAGS.workdir}: no trained run there '
                     f'(no {schema.CONFIG_FILE_NAME}); train first')


def _print_listing(text: str) -> None:
  try:
    print(text, flush=True)
  except BrokenPipeError:
    # `| head` read what it wanted and closed the pipe: no error for that.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv):
  try:
    # Until the training loop takes the signals over, a stop request ends
    # the run at once: nothing is trained yet, so nothing is lost.
    preemption.stop_start_up_on_signal()
    logs.configure()
    code = run(argv)
  except preemption.StoppedBeforeStart as e:
    exit_lib.exit_with_last_line(f'{_this_process()}{e}', EXIT_PREEMPTED)
  except (UsageError, DataError) as e:
    if not _multi_process():
      _fail_usage(e)
    exit_lib.exit_with_last_line(f'error: {_this_process()}{e}', EXIT_USAGE)
  except RunFailure as e:
    exit_lib.exit_with_last_line(f'error: {_this_process()}{e}', EXIT_FAILURE)
  except InputStalled as e:
    exit_lib.exit_with_last_line(f'error: {_this_process()}{e}', EXIT_INPUT_STALLED)
  except BaseException as e:  # pylint: disable=broad-except
    if not _multi_process() or isinstance(e, SystemExit):
      raise
    # Leaving through the interpreter's exit would wait in JAX's shutdown
    # barrier for the other processes, which wait for this one: say why and
    # go, so that they (or the launcher) see it gone at once.
    logging.exception('Process %s failed', _this_process())
    exit_lib.exit_with_last_line(f'error: {_this_process()}{type(e).__name__}: {e}',
                                 EXIT_ABORTED if isinstance(e, KeyboardInterrupt) else EXIT_FAILURE)
  sys.exit(code)


def _multi_process() -> bool:
  jax = sys.modules.get('jax')
  return jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1


def _this_process() -> str:
  """'process 1: ' in a multi-process run, else ''."""
  return f'process {sys.modules["jax"].process_index()}: ' if _multi_process() else ''


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags)
