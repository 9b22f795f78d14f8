"""--mode=bench: how fast the configured train step runs, as one JSON line.

The configured model, batch, mesh and engine on synthetic data (no files, no
decoding: what is timed is the step), or with bench.data='real' on the
configured data, whose input pipeline is first timed alone: its images/s,
CPU ms per image and images/s per host core, and whether this host's cores
keep up with its devices (trainer/host_input.py). Reports the compile time,
steady-state images/s, the step time's median and 90th percentile, the model's FLOPs per
image and the MFU against a matmul peak measured in the same run
(trainer/mfu.py), and the fraction of the time spent waiting for input. The
line is printed and appended to bench.jsonl in the work dir; nothing else
stays there (the work dir's lock, coordination/workdir_lock.py, only while it
runs), so a trained run's work dir can be benchmarked with its own config.
With profile_steps='A,B' (the bench's steps counted from 0, warm-up
included), steps A..B-1 are traced into WORKDIR/profile as in training, and
the record names them: a traced step is slower than one that is not.
"""

import datetime
import json
import os
import time

from absl import logging
import jax
import ml_collections
import numpy as np

from coordination import workdir_lock
from trainer import device_input
from trainer import engines
from trainer import experiment
from trainer import host_input
from trainer import input_wait
from trainer import mfu
from trainer import profiling
from trainer import progress
from trainer import state as state_lib

RESULTS_FILE_NAME = 'bench.jsonl'


def synthetic_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` with synthetic data of the same size and number of classes."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.data.source = 'synthetic'
  config.data.num_synthetic_classes = config.model.num_classes or 1000
  # Enough examples that the timed steps never repeat an epoch's order.
  config.data.num_synthetic_examples = max(
      config.data.num_synthetic_examples,
      config.batch_size * (config.bench.warmup_steps + config.bench.steps + 1))
  return config


def run_bench(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Compiles, warms up, times `bench.steps` steps; returns the JSON record."""
  if config.bench.data == 'real':
    # main.py checks the data of training runs only; here, before the work
    # dir is touched, with the same one-line errors.
    # pylint: disable-next=g-import-not-at-top
    from input_pipeline import check_data_config
    check_data_config(config.data)
  # Beside another run of this work dir the devices would be shared, and
  # the times wrong.
  with workdir_lock.hold(workdir, 'bench', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    return _timed_steps(config, workdir)


def _timed_steps(config: ml_collections.ConfigDict, workdir: str) -> dict:
  real = config.bench.data == 'real'
  if not real:
    config = synthetic_config(config)
  exp = experiment.build_experiment(config, workdir)
  start = time.perf_counter()
  engine = engines.create_engine(exp)
  compile_s = time.perf_counter() - start
  flops_per_step = mfu.step_flops(exp, engine)
  devices = list(exp.mesh.devices.flat)
  peak_before = mfu.measured_peak_flops(devices, exp.model.dtype)

  input_record = {}
  if real:
    logging.info('bench: timing the input pipeline alone, %d batches',
                 config.bench.steps)
    # The stream is closed when it is timed: its threads stop before the step is.
    input_images_per_sec, cpu_ms = host_input.time_input(
        exp.dataset.train_batches(0), max(1, config.bench.warmup_steps),
        config.bench.steps, pipeline=input_wait.pipeline_name(config),
        stall_timeout_s=config.data.stall_timeout_s)
    cpu_ms = round(cpu_ms, 3)  # what the record holds, and all else follows from
    input_record = {
        'input_images_per_sec': round(input_images_per_sec, 1),
        'input_cpu_ms_per_image': cpu_ms,
        'input_images_per_sec_per_core': round(1000.0 / cpu_ms, 1),
        'host_cores': host_input.host_cores(),
    }
  tracer = profiling.StepTracer(workdir, config.profile_steps,
                                enabled=jax.process_index() == 0)
  engine.start(state_lib.create_train_state(
      exp.model, exp.tx, config.data.image_size, exp.state_shardings, config.seed))
  batches = device_input.DevicePrefetcher(
      exp.dataset.train_batches(0), engine.batch_sharding,
      size=config.data.prefetch_batches, pipeline=input_wait.pipeline_name(config),
      stall_timeout_s=config.data.stall_timeout_s)
  try:
    logging.info('bench: step compiled in %.1f s, its FLOPs and the matmul peak '
                 'measured; %d warm-up steps, then %d timed', compile_s,
                 config.bench.warmup_steps, config.bench.steps)
    # profile_steps counts the bench's steps from 0, warm-up included.
    step = 0
    for _ in range(config.bench.warmup_steps):
      tracer.before_step(step)
      with tracer.annotated(step):
        engine.step(next(batches))
      engine.collect_metrics()
      step += 1
      tracer.after_step(step, engine.state)
    batches.pop_wait_s()
    logging.info('bench: warmed up; timing %d steps', config.bench.steps)
    times = []
    now_and_then = progress.Every(10.0)  # a slow step still shows it is alive
    for i in range(config.bench.steps):
      tracer.before_step(step)
      step_start = time.perf_counter()
      with tracer.annotated(step):
        engine.step(next(batches))
      batches.fill()  # the next batch's host work overlaps the step, as in training
      engine.collect_metrics()  # waits for the step: one time per step
      times.append(time.perf_counter() - step_start)
      step += 1
      tracer.after_step(step, engine.state)
      if now_and_then.due() and i + 1 < config.bench.steps:
        logging.info('bench: %d/%d steps timed, median %.4f s so far', i + 1,
                     config.bench.steps, np.median(times))
    input_wait_s = batches.pop_wait_s()
  finally:
    tracer.stop()
    engine.close()
  # Measured on both sides of the timed steps, so that a slow moment of the
  # machine during one measurement cannot make the MFU look better.
  peak = max(peak_before, mfu.measured_peak_flops(devices, exp.model.dtype))

  total_s = float(np.sum(times))
  images_per_sec = config.bench.steps * config.batch_size / total_s
  record = {
      'model': config.model.name,
      'width': config.model.width,
      'depth': config.model.depth,
      'image_size': config.data.image_size,
      'batch_size': config.batch_size,
      'dtype': np.dtype(exp.model.dtype).name,  # model.dtype=auto resolved
      'conv_form': exp.model.conv_form,
      'engine': config.engine,
      'mesh': dict(exp.mesh.shape),
      'shard_update': config.mesh.shard_update,
      'platform': devices[0].platform,
      'device_kind': devices[0].device_kind,
      'num_devices': len(devices),
      'xla_flags': os.environ.get('XLA_FLAGS', ''),  # with runtime.cpu_xnnpack's
      'glibc_tunables': os.environ.get('GLIBC_TUNABLES', ''),  # main.py's malloc setting
      'compile_s': round(compile_s, 2),
      'images_per_sec': round(images_per_sec, 2),
      'step_time_median_s': round(float(np.median(times)), 4),
      'step_time_p90_s': round(float(np.percentile(times, 90)), 4),
      'model_gflops_per_image': round(flops_per_step / config.batch_size / 1e9, 4),
      'peak_tflops': round(peak / 1e12, 4),
      'mfu': round(mfu.mfu(flops_per_step, total_s / config.bench.steps, peak), 4),
      'input_wait_fraction': round(input_wait_s / total_s, 4),
      'data_source': config.data.source,
      **input_record,
      'steps': config.bench.steps,
      'profile_steps': config.profile_steps,  # '' when no step was traced
      'date': datetime.date.today().isoformat(),
  }
  if real:
    # Per host: each process feeds its own devices.
    host_images_per_sec = record['images_per_sec'] / jax.process_count()
    cores, cpu_ms = record['host_cores'], record['input_cpu_ms_per_image']
    record['host_cores_needed'] = host_input.cores_needed(
        host_images_per_sec, cpu_ms)
    record['input_bound'] = (
        host_input.images_per_sec(cores, cpu_ms) < host_images_per_sec)
    record['host_input'] = host_input.verdict(host_images_per_sec, cores,
                                              cpu_ms)
    logging.info('bench: %s', record['host_input'])
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, RESULTS_FILE_NAME), 'a') as f:
      f.write(json.dumps(record) + '\n')
  logging.info('bench: %.1f img/s, MFU %.1f%% (peak %.1f TFLOP/s measured)',
               images_per_sec, 100 * record['mfu'], peak / 1e12)
  return record
