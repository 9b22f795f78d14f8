"""This trainer against the Flax ImageNet example, side by side in one run.

The Flax example (flax's `examples/imagenet`) is the trainer most JAX users
know. This script runs its own model, `create_train_state` and `train_step`
under its own `jax.pmap`, unchanged, from a checkout you point it at, and
this project's `main.py --mode=bench` on the same model, image size, global
batch and number of emulated devices, in turn (ours, Flax, ours, Flax, ...)
so that drift of the machine hits both alike. Both time steps one by one
after warm-up on random data already on the devices, and both count FLOPs
with XLA's cost analysis of the whole step with XLA's convolutions; the
Flax step's MFU is taken against the matmul peak that the adjacent bench run
measured.

  git clone https://github.com/google/flax /tmp/flax   # any recent commit
  .venv/bin/pip install --no-deps clu   # the example's train.py imports it
  .venv/bin/python benchmarks/flax_side_by_side.py \
      --flax_imagenet_dir=/tmp/flax/examples/imagenet \
      --model=resnet18 --image_size=64 --batch_size=32 --devices=2 \
      --out=results/speed/flax_side_by_side.jsonl

Prints one JSON line per run and one summary line (medians over rounds),
each with its provenance (benchmarks/provenance.py), and appends them to
--out when given.
"""

import functools
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

import bench_runs  # benchmarks/bench_runs.py, beside this script
import provenance  # benchmarks/provenance.py, beside this script

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

# This project's model names -> the example's.
_FLAX_MODELS = {'resnet18': 'ResNet18', 'resnet34': 'ResNet34', 'resnet50': 'ResNet50'}

flags.DEFINE_string('flax_imagenet_dir', '', "A checkout's examples/imagenet.")
flags.DEFINE_enum('model', 'resnet18', list(_FLAX_MODELS), 'Model in both trainers.')
flags.DEFINE_integer('image_size', 64, 'Square image side.')
flags.DEFINE_integer('batch_size', 32, 'Global batch.')
flags.DEFINE_integer('devices', 2, 'Emulated CPU devices (data parallel in both).')
flags.DEFINE_integer('steps', 10, 'Timed steps per run.')
flags.DEFINE_integer('warmup_steps', 3, 'Untimed steps after compiling.')
flags.DEFINE_integer('rounds', 2, 'Runs of each trainer, interleaved.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
flags.DEFINE_string('xla_flags', '', 'Extra XLA_FLAGS for both trainers.')
# Internal: the process that runs the Flax example.
flags.DEFINE_bool('flax_role', False, 'Run the Flax example here (internal).')
FLAGS = flags.FLAGS


def flax_example_run() -> dict:
  """Times the example's pmapped train_step; runs in its own process, with
  the example's directory first on sys.path (its `models` and
  `input_pipeline` would collide with this project's)."""
  ours = {os.path.abspath(p or '.') for p in (_BENCH_DIR, bench_runs.ROOT)}
  sys.path[:] = [FLAGS.flax_imagenet_dir] + [
      p for p in sys.path if os.path.abspath(p or '.') not in ours]
  # pylint: disable=g-import-not-at-top
  import jax
  import ml_collections
  import numpy as np
  from flax import jax_utils
  import models as flax_models
  import train as flax_train
  # pylint: enable=g-import-not-at-top

  model = flax_train.create_model(
      model_cls=getattr(flax_models, _FLAX_MODELS[FLAGS.model]), half_precision=False)
  config = ml_collections.ConfigDict({'half_precision': False, 'momentum': 0.9})
  learning_rate_fn = lambda step: 0.1
  state = flax_train.create_train_state(jax.random.key(0), config, model,
                                        FLAGS.image_size, learning_rate_fn)
  # As the example's train_and_evaluate pmaps it.
  p_train_step = jax.pmap(
      functools.partial(flax_train.train_step, learning_rate_fn=learning_rate_fn),
      in_axes=(None, 0), out_axes=(None, 0), axis_name='batch')
  n = jax.local_device_count()
  rng = np.random.default_rng(0)
  size = FLAGS.image_size
  host_batch = {
      'image': rng.normal(size=(n, FLAGS.batch_size // n, size, size, 3)).astype(np.float32),
      'label': rng.integers(0, flax_train.NUM_CLASSES, (n, FLAGS.batch_size // n)).astype(np.int32),
  }
  batch = next(jax_utils.prefetch_to_device(iter([host_batch]), 1))
  flops_per_device = p_train_step.lower(state, batch).cost_analysis()
  if isinstance(flops_per_device, (list, tuple)):
    flops_per_device = flops_per_device[0]
  flops_per_step = n * float(flops_per_device.get('flops', 0.0))

  start = time.perf_counter()
  state, metrics = p_train_step(state, batch)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  for _ in range(FLAGS.warmup_steps):
    state, metrics = p_train_step(state, batch)
    jax.block_until_ready(metrics)
  times = []
  for _ in range(FLAGS.steps):
    start = time.perf_counter()
    state, metrics = p_train_step(state, batch)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  return {
      'trainer': 'flax_example',
      'compile_s': round(compile_s, 2),
      'images_per_sec': round(FLAGS.steps * FLAGS.batch_size / sum(times), 2),
      'step_time_median_s': round(statistics.median(times), 4),
      'model_gflops_per_image': round(flops_per_step / FLAGS.batch_size / 1e9, 4),
  }


def _env() -> dict:
  """What both trainers' processes get on top of this process's environment."""
  return {'XLA_FLAGS': f'--xla_force_host_platform_device_count={FLAGS.devices} '
                       f'{FLAGS.xla_flags}'.strip(),
          'TF_CPP_MIN_LOG_LEVEL': os.environ.get('TF_CPP_MIN_LOG_LEVEL', '3')}


def run_ours() -> dict:
  record = bench_runs.run_bench(
      [f'--config.model.name={FLAGS.model}', '--config.model.width=0',
       f'--config.data.image_size={FLAGS.image_size}',
       f'--config.batch_size={FLAGS.batch_size}', f'--config.bench.steps={FLAGS.steps}',
       f'--config.bench.warmup_steps={FLAGS.warmup_steps}'], _env())
  record['trainer'] = 'this_project'
  return record


def run_flax() -> dict:
  command = [sys.executable, os.path.abspath(__file__), '--flax_role',
             *[f'--{name}={getattr(FLAGS, name)}' for name in (
                 'flax_imagenet_dir', 'model', 'image_size', 'batch_size', 'steps',
                 'warmup_steps')]]
  result = subprocess.run(command, cwd=FLAGS.flax_imagenet_dir,
                          env={**os.environ, **_env()}, text=True,
                          capture_output=True, check=False)
  if result.returncode:
    raise RuntimeError(f'the Flax example failed: {result.stderr[-2000:]}')
  return bench_runs.last_json_line(result.stdout)


def main(argv):
  del argv
  if not os.path.isfile(os.path.join(FLAGS.flax_imagenet_dir, 'train.py')):
    raise app.UsageError(f'--flax_imagenet_dir={FLAGS.flax_imagenet_dir!r} has no '
                         "train.py: give a flax checkout's examples/imagenet")
  if FLAGS.batch_size % FLAGS.devices:
    raise app.UsageError(f'--batch_size={FLAGS.batch_size} is not a multiple of '
                         f'--devices={FLAGS.devices}')
  if FLAGS.flax_role:
    print(json.dumps(flax_example_run()))
    return
  results = provenance.Results(FLAGS.out)
  ours, theirs = [], []
  for _ in range(FLAGS.rounds):
    ours.append(run_ours())
    flax_record = run_flax()
    # Against the peak of the bench run just before it.
    flax_record['mfu'] = round(
        flax_record['model_gflops_per_image'] * flax_record['images_per_sec']
        / (ours[-1]['peak_tflops'] * 1e3), 4)
    theirs.append(flax_record)
    for record in (ours[-1], theirs[-1]):
      results.write(record)
  median = lambda records, key: statistics.median(r[key] for r in records)
  summary = {
      'summary': f'{FLAGS.model} {FLAGS.image_size}px batch {FLAGS.batch_size} '
                 f'on {FLAGS.devices} devices',
      'rounds': FLAGS.rounds,
      'this_project_images_per_sec': median(ours, 'images_per_sec'),
      'flax_example_images_per_sec': median(theirs, 'images_per_sec'),
      'this_project_mfu': median(ours, 'mfu'),
      'flax_example_mfu': median(theirs, 'mfu'),
      'ratio': round(median(ours, 'images_per_sec') / median(theirs, 'images_per_sec'), 3),
      'xla_flags': FLAGS.xla_flags,
  }
  results.write(summary)


if __name__ == '__main__':
  app.run(main)
