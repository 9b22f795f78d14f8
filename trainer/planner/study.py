"""--mode=study: the PS engine over a grid, against the planner's predictions.

Each cell (model, N_w, N_ps, bandwidth, global batch) runs the synchronous
PS engine for a few steps on synthetic data and records the median measured
step time. The prediction for the cell uses only the planner's own
measurements (T_C of the workers' program, S, the shards' update time, the
host<->device copy speed) and the configured link; it never sees the
engine's times, so the comparison can fail. Cells are appended to
study.jsonl as they finish, so an interrupted study resumes where it stopped.
"""

import json
import math
import os
import tempfile
import time

from absl import logging
import jax
import numpy as np

from configs.errors import UsageError
from trainer import validation
from trainer.validation import parse_list
from trainer import device_input
from trainer import engines
from trainer import experiment
from trainer import progress
from trainer import state as state_lib
from trainer import workdir_lock
from trainer.planner import formulas
from trainer.planner import measure
from trainer.planner import report

RESULTS_FILE = 'study.jsonl'
_WARMUP_STEPS = 2


def grid(config) -> list[dict]:
  """Every cell of the study, in the order they run."""
  study = config.study  # values checked by trainer/validation.py
  models = [m.strip() for m in study.models.split(',') if m.strip()]
  bandwidths = parse_list('study.link_bandwidths_gbps', study.link_bandwidths_gbps, float)
  cells = []
  for model in models:
    for workers in parse_list('study.num_workers', study.num_workers):
      for batch in parse_list('study.global_batch_sizes', study.global_batch_sizes):
        for bandwidth in bandwidths:
          for shards in parse_list('study.num_shards', study.num_shards):
            cells.append({'model': model, 'num_workers': workers, 'batch_size': batch,
                          'bandwidth_gbps': bandwidth, 'num_shards': shards})
  return cells


def check(config, num_devices: int) -> list[dict]:
  """The grid, or UsageError for one that cannot run here."""
  cells = grid(config)
  for c in cells:
    # Every cell is a config of its own: the trainer's checks, with the cell
    # named, before any cell runs.
    try:
      one = cell_config(config, c)
      validation.check_config(one)
      validation.check_against_devices(one, num_devices=num_devices, num_processes=1)
    except UsageError as e:
      raise UsageError(f'study cell {c}: {e}') from e
  return cells


def cell_key(cell: dict) -> str:
  return json.dumps(cell, sort_keys=True)


def cell_config(config, cell: dict):
  c = config.copy_and_resolve_references()
  c.model.name = cell['model']
  c.model.width = config.study.model_width
  c.data.source = 'synthetic'
  c.data.num_synthetic_classes = 10
  c.data.num_synthetic_examples = cell['batch_size'] * 4
  c.batch_size = cell['batch_size']
  c.num_train_steps = 1000
  c.engine = 'ps'
  c.ps.mode = 'sync'
  c.ps.max_staleness = 1  # the sync engine's only accepted value
  c.ps.overlap = False
  c.network.num_workers = cell['num_workers']
  c.ps.num_shards = cell['num_shards']
  c.network.bandwidth_gbps = cell['bandwidth_gbps']
  return c


def measure_step_s(exp, steps: int) -> tuple[float, dict]:
  """Median wall time of a PS step, and the mean time split."""
  engine = engines.create_engine(exp)
  try:
    engine.start(state_lib.create_train_state(
        exp.model, exp.tx, exp.config.data.image_size, exp.state_shardings,
        exp.config.seed))
    batches = exp.dataset.train_batches(0)
    times, records = [], []
    for i in range(_WARMUP_STEPS + steps):
      batch = device_input.to_global(next(batches), engine.batch_sharding)
      jax.block_until_ready(batch)
      start = time.perf_counter()
      engine.step(batch)
      record = engine.collect_metrics()[-1]
      if i >= _WARMUP_STEPS:
        times.append(time.perf_counter() - start)
        records.append(record)
  finally:
    engine.close()
  split = {k: float(np.mean([r[k] for r in records]))
           for k in ('compute_s', 'push_s', 'update_s', 'pull_s', 'wait_s')}
  return float(np.median(times)), split


class Predictor:
  """The planner's prediction of a cell's step time, from its own measurements.

  S, the update time and the host copies are measured once per study
  process. T_C is measured for each cell, just before and just after the
  engine runs it, and the mean taken: the speed of this shared 2-core
  machine drifts by 10-30% over seconds (the same program's median time
  moves that much between consecutive measurements), and bracketing the
  cell keeps that drift out of the comparison. The engine's own times are
  never used.
"""

  def __init__(self, config):
    self._config = config
    self._cache = {}

  def _once(self, key, fn):
    if key not in self._cache:
      self._cache[key] = fn()
    return self._cache[key]

  def compute_s(self, exp, cell: dict) -> float:
    """T_C: the median time of the workers' program alone, measured now
    (compiled once per model, N_w and batch)."""
    n, model = cell['num_workers'], cell['model']
    timer = self._once(('timer', model, n, cell['batch_size']), lambda: measure.ComputeTimer(
        exp, n, cell['batch_size'] // n))
    return timer.median_s(self._config.plan.repeats)

  def predict(self, exp, cell: dict, compute: float) -> dict:
    """The cell's step time, given T_C (`compute`)."""
    n, n_ps = cell['num_workers'], cell['num_shards']
    model = cell['model']
    repeats = self._config.plan.repeats
    size = measure.model_bytes(exp)
    update = self._once(('update', model, n, n_ps),
                        lambda: measure.update_s(exp, n, n_ps, repeats))
    copies = self._once(('copies', model), lambda: measure.host_copies_s(exp, repeats))
    largest = self._once(('largest', model, n_ps),
                         lambda: measure.largest_shard_bytes(exp, n_ps))
    # Each worker copies its gradients off its device and into the shards'
    # buffers, and its parameters into a buffer and back on its device; the
    # workers share the host's cores for it.
    share = math.ceil(n / (os.cpu_count() or 1))
    device_copies = copies['device_s'] * share
    bandwidth = measure.gbps_to_bytes_per_s(cell['bandwidth_gbps'])
    latency = exp.config.network.latency_ms / 1e3
    step = formulas.ps_step_s(
        compute, size, bandwidth, n, n_ps, latency_s=latency, update_s=update,
        largest_shard_bytes=largest,
        host_copy_s=copies['per_direction_s'] * share) + device_copies
    allreduce = formulas.spmd_step_s(compute, size, bandwidth, n, latency_s=latency)
    return {'predicted_step_s': step, 'compute_s_planned': compute,
            'model_bytes': size, 'update_s_planned': update,
            'direction_s_planned': formulas.ps_direction_s(
                size, bandwidth, n, n_ps, latency, largest),
            'host_copies_s_planned': device_copies,
            'allreduce_step_s_predicted': allreduce}


def load_results(workdir: str) -> dict:
  path = os.path.join(workdir, RESULTS_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return {cell_key(r['cell']): r for r in rows}


def run_study(config, workdir: str) -> dict:
  """Runs the missing cells, then writes study.md and the plots."""
  with workdir_lock.hold(workdir, 'study', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    return _run_cells(config, workdir)


def _run_cells(config, workdir: str) -> dict:
  cells = check(config, jax.device_count())
  os.makedirs(workdir, exist_ok=True)
  done = load_results(workdir)
  todo = [c for c in cells if cell_key(c) not in done]
  logging.info('Study: %d cells, %d done before, %d to run', len(cells),
               len(cells) - len(todo), len(todo))
  predictor = Predictor(config)
  measure.reuse_compilations(tempfile.mkdtemp(prefix='study_xla_cache_'))
  started = time.perf_counter()
  with open(os.path.join(workdir, RESULTS_FILE), 'a') as out:
    for i, cell in enumerate(todo):
      cell_started = time.perf_counter()
      exp = experiment.build_experiment(cell_config(config, cell), workdir)
      before = predictor.compute_s(exp, cell)
      measured, split = measure_step_s(exp, config.study.steps)
      after = predictor.compute_s(exp, cell)
      prediction = predictor.predict(exp, cell, (before + after) / 2)
      row = {'cell': cell, 'measured_step_s': measured, **split, **prediction}
      row['images_per_sec'] = cell['batch_size'] / measured
      row['error'] = (prediction['predicted_step_s'] - measured) / measured
      out.write(json.dumps(row) + '\n')
      out.flush()
      done[cell_key(cell)] = row
      now = time.perf_counter()
      # The ETA counts only the cells of this run: a resumed study's earlier
      # cells took no time here.
      logging.info('Study %s: %s: measured %.3fs, predicted %.3fs (%+.1f%%)',
                   progress.done_line('cell', len(cells) - len(todo) + i + 1,
                                      len(cells), now - cell_started,
                                      progress.eta_text(i + 1, len(todo), now - started)),
                   cell, measured, prediction['predicted_step_s'], 100 * row['error'])
  rows = [done[cell_key(c)] for c in cells]
  return report.write_study(rows, workdir)
