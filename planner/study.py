"""--mode=study: the emulated engines over a grid, against the planner's predictions.

Each setting (model, N_w, bandwidth, global batch) runs under every engine
of study.engines: the synchronous PS engine once per N_ps, the all-reduce
engine once (a ring has no shards). A cell is one engine in one setting; it
runs for a few steps on synthetic data and records the median measured step
time. The prediction for the cell uses only the planner's own measurements
(T_C of the workers' program, S, the shards' update time, the host's copies
and hand-offs) and the configured link; it never sees the engine's times,
so the comparison can fail (tests/test_study_predictor.py). What depends
on the host's speed is sampled between the engine's timed steps, as close
in time to them as the planner's figures can be on a machine whose speed
drifts. Cells are
appended to study.jsonl as they finish, so an interrupted study resumes
where it stopped.
"""

import json
import os
import tempfile
import time

from absl import logging
import jax
import numpy as np

from configs.values import parse_list, parse_names
from coordination import workdir_lock
from core import timing
from core import units
from core.errors import UsageError
from models import registry
from planner import checks
from planner import cluster_model
from planner import formulas
from planner import measure
from planner import report
from trainer import device_input
from trainer import engines
from trainer import experiment
from trainer import progress
from trainer import state as state_lib
from trainer.engines import allreduce

RESULTS_FILE = 'study.jsonl'
_WARMUP_STEPS = 2
# Runs of each timer per sample between two engine steps (after one untimed
# run): one keeps a sample as close to its step as it can be.
_SAMPLE_REPEATS = 1


def study_engines(config) -> list[str]:
  """study.engines as names, in order, each once (checked by planner/checks.py)."""
  return list(dict.fromkeys(parse_names(
      'study.engines', config.study.engines, engines.emulated_names(), 'engine')))


def _engine_cells(engine: str, setting: dict, study, algorithms) -> list[dict]:
  """The cells of one engine in one setting: a PS cell per shard count; an
  all-reduce cell per algorithm (with one worker a host, hierarchical is the
  flat ring)."""
  if engine == 'ps':
    return [{'engine': 'ps', **setting, 'num_shards': shards}
            for shards in parse_list('study.num_shards', study.num_shards)]
  per_host = setting['devices_per_host']
  return [{'engine': engine, **setting, 'algorithm': a}
          for a in (algorithms if per_host > 1 else ['ring'])]


def grid(config) -> list[dict]:
  """Every cell of the study, in the order they run: each setting's engines
  one after another, so that what the engines are compared on runs close
  together in time on a machine whose speed drifts."""
  study = config.study  # values checked by planner/checks.py
  models = parse_names('study.models', study.models, registry.MODEL_NAMES, 'model')
  bandwidths = parse_list('study.link_bandwidths_gbps', study.link_bandwidths_gbps, float)
  algorithms = parse_names('study.allreduce_algorithms', study.allreduce_algorithms,
                           allreduce.ALGORITHMS, 'algorithm')
  cells = []
  for model in models:
    for workers in parse_list('study.num_workers', study.num_workers):
      for per_host in parse_list('study.devices_per_host', study.devices_per_host):
        for batch in parse_list('study.global_batch_sizes', study.global_batch_sizes):
          for bandwidth in bandwidths:
            setting = {'model': model, 'num_workers': workers, 'batch_size': batch,
                       'bandwidth_gbps': bandwidth, 'devices_per_host': per_host}
            for engine in study_engines(config):
              cells += _engine_cells(engine, setting, study, algorithms)
  return cells


def check(config, num_devices: int, check_cell) -> list[dict]:
  """The grid, or UsageError for one that cannot run here.
  check_cell(cell config, num_devices): every check main.py runs
  (cli/validation.py: check_study_cell, which calls this package's too)."""
  cells = grid(config)
  for c in cells:
    # Every cell is a config of its own: the checks, with the cell named,
    # before any cell runs.
    try:
      check_cell(cell_config(config, c), num_devices)
    except UsageError as e:
      raise UsageError(f'study cell {c}: {e}') from e
  return cells


def cell_key(cell: dict) -> str:
  """The cell's identity in study.jsonl; it names the engine, so a row of a
  study from before study.engines (no engine) matches no cell and reruns."""
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
  c.engine = cell['engine']
  c.network.num_workers = cell['num_workers']
  c.network.bandwidth_gbps = cell['bandwidth_gbps']
  c.network.devices_per_host = cell.get('devices_per_host', 1)
  if cell['engine'] == 'ps':
    c.ps.mode = 'sync'
    c.ps.max_staleness = 1  # the sync engine's only accepted value
    c.ps.overlap = False
    c.ps.num_shards = cell['num_shards']
  else:
    c.allreduce.algorithm = cell.get('algorithm', 'ring')
  return c


def measure_step_s(exp, steps: int, create_engine=engines.create_engine,
                   warmup: int = _WARMUP_STEPS, between=None) -> tuple[float, dict]:
  """Median wall time of a step of the configured engine, and the mean of
  each of its step phases (engine.step_phases) over the `steps` timed steps
  after `warmup` untimed ones, with the process's user and kernel CPU
  seconds per timed step (medians) and the timed steps' wall times.
  between(), if given, runs after each timed step, outside its time (the
  planner's samples)."""
  engine = create_engine(exp)
  try:
    engine.start(state_lib.create_train_state(
        exp.model, exp.tx, exp.config.data.image_size, exp.state_shardings,
        exp.config.seed))
    batches = exp.dataset.train_batches(0)
    times, records, cpu = [], [], []
    for i in range(warmup + steps):
      batch = device_input.to_global(next(batches), engine.batch_sharding)
      jax.block_until_ready(batch)
      cpu_start, start = timing.process_cpu_s(), time.perf_counter()
      engine.step(batch)
      record = engine.collect_metrics()[-1]
      if i >= warmup:
        times.append(time.perf_counter() - start)
        cpu.append(np.subtract(timing.process_cpu_s(), cpu_start))
        records.append(record)
        if between is not None:
          between()
  finally:
    engine.close()
  split = {k: float(np.mean([r[k] for r in records])) for k in engine.step_phases}
  user, kernel = np.median(cpu, axis=0)
  return float(np.median(times)), {**split, 'step_user_cpu_s': float(user),
                                   'step_kernel_cpu_s': float(kernel),
                                   'steps_s': [round(t, 6) for t in times]}


class Predictor:
  """The planner's prediction of a cell's step time, from its own measurements.

  `measurements` is where they come from (the measure module; tests give a
  fake). S and the shards' sizes are taken once. What depends on the
  host's speed (T_C, and for PS the update, the host's copies and
  hand-offs) is measured for each cell once before the engine starts and
  then after each of its timed steps (`measure_now`), and the median of
  those samples taken: the speed of a shared 2-core machine drifts by
  10-30% over seconds, so figures taken minutes, or even the length of a
  cell, apart may compare different machines; samples taken between the
  engine's steps are as close in time to them as they can be. The engine's
  own times are never used.
  """

  def __init__(self, config, measurements=measure):
    self._config = config
    self._measure = measurements
    self._cache = {}

  def _once(self, key, fn):
    if key not in self._cache:
      self._cache[key] = fn()
    return self._cache[key]

  def compute_s(self, exp, cell: dict, repeats: int | None = None) -> float:
    """T_C: the median time of the workers' program alone, measured now
    (compiled once per model, N_w and batch)."""
    n, model = cell['num_workers'], cell['model']
    timer = self._once(('timer', model, n, cell['batch_size']),
                       lambda: self._measure.ComputeTimer(exp, n, cell['batch_size'] // n))
    return timer.median_s(repeats or self._config.plan.repeats)

  def measure_now(self, exp, cell: dict, repeats: int | None = None) -> dict:
    """What the prediction takes from the host's speed, measured now, each
    the median of `repeats` runs (default plan.repeats): {'compute_s': T_C,
    'compute_kernel_cpu_s': the process's kernel CPU seconds per run of the
    workers' program (untimed run included), and the engine's host timer's
    times}."""
    # The grid runs one model after another: an earlier model's timers
    # (its programs, shards and buffers) are not needed again.
    self.close(keep_model=cell['model'])
    repeats = repeats or self._config.plan.repeats
    _, kernel_start = timing.process_cpu_s()
    now = {'compute_s': self.compute_s(exp, cell, repeats)}
    # Per run, timing's untimed one included.
    now['compute_kernel_cpu_s'] = (timing.process_cpu_s()[1] - kernel_start) / (repeats + 1)
    # One timer per model, engine and layout: the batch and the link do not
    # change the host's own work.
    layout = tuple(sorted((k, v) for k, v in cell.items()
                          if k not in ('model', 'batch_size', 'bandwidth_gbps')))
    timer = self._once(('host', cell['model'], layout),
                       lambda: self._measure.host_timer(exp, cell))
    now.update(timer.median_s(repeats))
    return now

  def close(self, keep_model: str | None = None) -> None:
    """Drops every timer but those of `keep_model`, ending the host timers'
    threads, so that their memory returns before the next model's cells."""
    for key in [k for k in self._cache if k[0] in ('timer', 'host') and k[1] != keep_model]:
      timer = self._cache.pop(key)
      if key[0] == 'host':
        timer.close()

  def predict(self, exp, cell: dict, now: dict) -> dict:
    """The cell's step time under its engine, from measure_now's figures
    (the median of the cell's samples)."""
    predictors = {'ps': self.predict_ps, 'allreduce': self.predict_allreduce}
    if cell['engine'] not in predictors:
      raise ValueError(f'no prediction for engine {cell["engine"]!r}')
    return predictors[cell['engine']](exp, cell, now)

  def predict_ps(self, exp, cell: dict, now: dict) -> dict:
    """The synchronous PS step: T_C, push, update, pull over the links, and
    what the emulation adds on this host (overhead_s_planned)."""
    n, n_ps = cell['num_workers'], cell['num_shards']
    m, compute, update = self._measure, now['compute_s'], now['update_s']
    size = self._once(('bytes', cell['model']), lambda: m.model_bytes(exp))
    largest = self._once(('largest', cell['model'], n_ps),
                         lambda: m.largest_shard_bytes(exp, n_ps))
    bandwidth = units.gbps_to_bytes_per_s(cell['bandwidth_gbps'])
    latency = exp.config.network.latency_ms / 1e3
    # A host's G workers push through its one NIC: G*S leave it per
    # direction (the servers have NICs of their own).
    host_bytes = cell.get('devices_per_host', 1) * size
    direction = formulas.ps_direction_s(host_bytes, bandwidth, n, n_ps, latency, largest)
    # A message is one shard's pieces (the largest shard's, on the busiest
    # link); the link starts on it once its first chunk is copied.
    exposed = formulas.first_chunk_share(largest, m.link_chunk_bytes(cell['bandwidth_gbps']))
    emulated = formulas.ps_step_s(
        compute, host_bytes, bandwidth, n, n_ps, latency_s=latency, update_s=update,
        largest_shard_bytes=largest, host_push_s=now['push_s'],
        host_pull_s=now['pull_s'], exposed_share=exposed)
    step = emulated + now['device_copies_s'] + now['bookkeeping_s']
    return {'predicted_step_s': step,
            'compute_s_planned': compute,
            'model_bytes': size, 'update_s_planned': update,
            'direction_s_planned': direction,
            'communication_s_planned': 2 * direction,
            'host_copies_s_planned': now['device_copies_s'],
            'host_push_s_planned': now['push_s'], 'host_pull_s_planned': now['pull_s'],
            'bookkeeping_s_planned': now['bookkeeping_s'],
            # What the emulation adds to T_C + 2 directions + update + the
            # device copies: the host's copies and hand-offs that the links
            # do not hide, and the step's fixed bookkeeping.
            'overhead_s_planned': step - (compute + 2 * direction + update +
                                          now['device_copies_s']),
            'allreduce_step_s_predicted': formulas.spmd_step_s(
                compute, size, bandwidth, n, latency_s=latency)}

  def predict_allreduce(self, exp, cell: dict, now: dict) -> dict:
    """The all-reduce engine's step: T_C, the workers' vectors off their
    devices, the rings over the links, the sums back on, the update.

    Each ring step's link time is the cluster model's
    (cluster_model.allreduce_phases); the host's work of the rings (copies,
    additions, the barriers between steps), measured on unlimited links,
    goes on while the links carry the bytes except for each message's first
    chunk (emulated_direction_s, as for PS), spread evenly over the ring
    steps.
    """
    m, compute = self._measure, now['compute_s']
    n, g = cell['num_workers'], cell.get('devices_per_host', 1)
    size = self._once(('bytes', cell['model']), lambda: m.model_bytes(exp))
    network = exp.config.network
    hosts = cluster_model.Cluster(
        num_hosts=n // g, devices_per_host=g,
        nic_bandwidth=units.gbps_to_bytes_per_s(cell['bandwidth_gbps']),
        nic_latency_s=network.latency_ms / 1e3,
        intra_bandwidth=units.gbps_to_bytes_per_s(network.intra_host_gbps),
        intra_latency_s=network.intra_host_latency_ms / 1e3)
    phases = cluster_model.allreduce_phases(size, hosts, cell.get('algorithm', 'ring'))
    steps = sum(p.steps for p in phases)
    host_per_step = now['ring_s'] / steps if steps else 0.0
    link = sum(p.steps * p.step_s for p in phases)
    chunk = m.link_chunk_bytes(cell['bandwidth_gbps'])
    rings = sum(p.steps * formulas.emulated_direction_s(
        p.step_s, host_per_step, formulas.first_chunk_share(p.message_bytes, chunk))
                for p in phases)
    step = compute + now['device_copies_s'] + rings + now['update_s'] + now['bookkeeping_s']
    return {'predicted_step_s': step,
            'compute_s_planned': compute,
            'model_bytes': size, 'update_s_planned': now['update_s'],
            'communication_s_planned': link,
            'host_copies_s_planned': now['device_copies_s'],
            'host_ring_s_planned': now['ring_s'],
            'bookkeeping_s_planned': now['bookkeeping_s'],
            'overhead_s_planned': step - (compute + link + now['update_s'] +
                                          now['device_copies_s']),
            'allreduce_step_s_predicted': formulas.spmd_step_s(
                compute, size, units.gbps_to_bytes_per_s(cell['bandwidth_gbps']), n,
                latency_s=network.latency_ms / 1e3)}


def load_results(workdir: str) -> dict:
  path = os.path.join(workdir, RESULTS_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return {cell_key(r['cell']): r for r in rows}


def run_study(config, workdir: str, check_cell) -> dict:
  """Runs the missing cells, then writes study.md and the plots (check_cell:
  as for `check`)."""
  checks.check_one_process('study', jax.process_count())
  with workdir_lock.hold(workdir, 'study', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    # A cache the run already has (runtime.compilation_cache_dir) serves as
    # well, and keeps what an earlier study compiled.
    if not jax.config.jax_compilation_cache_dir:
      measure.reuse_compilations(tempfile.mkdtemp(prefix='study_xla_cache_'))
    return run_cells(config, workdir, check_cell)


def _run_cell(config, workdir: str, cell: dict, measure_step, predictor) -> dict:
  """One cell's row: the engine's steps, the planner's samples of the
  host's speed between them, and the prediction from those."""
  exp = experiment.build_experiment(cell_config(config, cell), workdir)
  # Once before the engine starts (its timers compiled and warmed, with
  # plan.repeats runs each), then once after each timed step.
  samples = [predictor.measure_now(exp, cell)]
  measured, split = measure_step(exp, config.study.steps, between=lambda: samples.append(
      predictor.measure_now(exp, cell, repeats=_SAMPLE_REPEATS)))
  now = {k: float(np.median([s[k] for s in samples])) for k in samples[0]}
  prediction = predictor.predict(exp, cell, now)
  return {'cell': cell, 'measured_step_s': measured, **split, **prediction,
          'compute_kernel_cpu_s_planned': now['compute_kernel_cpu_s'],
          'planner_samples': len(samples),
          # The malloc setting decides which runs fault in fresh memory
          # (cli/runtime.py); None: not set (not started by main.py).
          'glibc_tunables': os.environ.get('GLIBC_TUNABLES'),
          'images_per_sec': cell['batch_size'] / measured,
          'error': (prediction['predicted_step_s'] - measured) / measured}


def run_cells(config, workdir: str, check_cell, measure_step=measure_step_s,
              predictor: Predictor | None = None) -> dict:
  """Runs the cells not in study.jsonl yet and writes the report (check_cell:
  as for `check`).

  measure_step(exp, steps, between) -> (median step seconds, phase split),
  calling between() after each timed step, is the study's only contact
  with the engine, and predictor its only source of
  predictions: the two meet in the row's error and nowhere else (tests
  replace either to show that).
  """
  cells = check(config, jax.device_count(), check_cell)
  os.makedirs(workdir, exist_ok=True)
  done = load_results(workdir)
  todo = [c for c in cells if cell_key(c) not in done]
  logging.info('Study: %d cells, %d done before, %d to run', len(cells),
               len(cells) - len(todo), len(todo))
  predictor = predictor or Predictor(config)
  started = time.perf_counter()
  try:
    with open(os.path.join(workdir, RESULTS_FILE), 'a') as out:
      for i, cell in enumerate(todo):
        cell_started = time.perf_counter()
        row = _run_cell(config, workdir, cell, measure_step, predictor)
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
                     cell, row['measured_step_s'], row['predicted_step_s'],
                     100 * row['error'])
  finally:
    predictor.close()
  rows = [done[cell_key(c)] for c in cells]
  return report.write_study(rows, workdir)
