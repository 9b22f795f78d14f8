"""The study can fail: its prediction never sees the engine's times, and its
report splits the error by what bounds a cell and compares measured engines.

No engine runs here: the engine's measurement and the planner's
measurements are fakes with known numbers, so every figure is exact.
"""

import json
import math
import types

import jax
import numpy as np
import pytest

from cli import validation
from configs import default
from core import units
from planner import cluster_model
from planner import formulas
from planner import report
from planner import study
from trainer import state as state_lib

MB = 1e6
GBIT = units.gbps_to_bytes_per_s(1.0)


class FakeMeasurements:
  """The planner's measurements (the measure module's surface), fixed:
  S = 1 MB, T_C = 50 ms, update 10 ms, and no host overheads."""

  model_bytes = staticmethod(lambda exp: 1 * MB)
  largest_shard_bytes = staticmethod(lambda exp, num_shards: 1 * MB / num_shards)
  link_chunk_bytes = staticmethod(lambda gbps: 0.25 * MB)

  class ComputeTimer:
    def __init__(self, exp, num_workers, per_worker_batch):
      del exp, num_workers, per_worker_batch

    def median_s(self, repeats):
      del repeats
      return 0.050

  class HostTimer:
    def __init__(self, exp, num_workers, num_shards):
      del exp, num_workers, num_shards

    def median_s(self, repeats):
      del repeats
      return {'update_s': 0.010, 'push_s': 0.0, 'pull_s': 0.0,
              'device_copies_s': 0.0, 'bookkeeping_s': 0.0}

    def close(self):
      pass

  def host_timer(self, exp, cell):
    """Each engine's host timer, as measure.host_timer finds it."""
    if cell['engine'] == 'ps':
      return self.HostTimer(exp, cell['num_workers'], cell['num_shards'])
    return self.AllReduceHostTimer(exp, cell['num_workers'], cell['devices_per_host'],
                                   cell['algorithm'])


def _tiny_config(**study_keys):
  config = default.get_config()
  config.model.width = 4
  config.data.image_size = 16
  config.plan.repeats = 1
  config.study.models = 'resnet18'
  config.study.model_width = 4
  config.study.num_workers = '2'
  config.study.num_shards = '1'
  config.study.global_batch_sizes = '8'
  config.study.link_bandwidths_gbps = '1'
  config.study.steps = 1
  config.study.engines = 'ps'
  for key, value in study_keys.items():
    config.study[key] = value
  return config


# T_C + push + update + pull of the fake measurements for 2 workers and one
# shard on 1 Gbit/s: each direction carries 2 workers' 1 MB through the
# shard's link, 16 ms.
TRUE_STEP_S = 0.050 + 0.016 + 0.010 + 0.016


def _engine_off_by(factor: float):
  """A fake engine measurement: the true step time, and its phases, times
  `factor` (a slower or faster engine than the planner's measurements say)."""
  def measure_step(exp, steps, between):
    del exp
    for _ in range(steps):
      between()  # the planner's samples between the engine's steps
    phases = {'compute_s': 0.050, 'push_s': 0.016, 'update_s': 0.010, 'pull_s': 0.016,
              'wait_s': 0.0}
    return factor * TRUE_STEP_S, {k: factor * v for k, v in phases.items()}
  return measure_step


def test_the_error_follows_the_engine_and_the_prediction_never_sees_it(tmp_path):
  config = _tiny_config()
  rows = {}
  for factor in (1.0, 2.0, 0.5):
    workdir = tmp_path / f'x{factor}'
    predictor = study.Predictor(config, measurements=FakeMeasurements())
    summary = study.run_cells(config, str(workdir), validation.check_study_cell,
                              measure_step=_engine_off_by(factor), predictor=predictor)
    [rows[factor]] = [json.loads(l) for l in (workdir / 'study.jsonl').read_text().splitlines()]
    assert summary['cells'] == 1
  # The prediction is the same whatever the engine did...
  predicted = {f: r['predicted_step_s'] for f, r in rows.items()}
  assert predicted[1.0] == pytest.approx(TRUE_STEP_S)
  assert predicted[2.0] == predicted[1.0] == predicted[0.5]
  # ...so an engine twice as slow is under-predicted by half, one twice as
  # fast over-predicted by 100%, instead of an error of 0 for each.
  assert rows[1.0]['error'] == pytest.approx(0.0, abs=1e-9)
  assert rows[2.0]['error'] == pytest.approx(-0.5)
  assert rows[0.5]['error'] == pytest.approx(1.0)
  assert rows[2.0]['push_s'] == pytest.approx(2 * rows[1.0]['push_s'])  # the engine's own
  assert rows[1.0]['cell']['engine'] == 'ps'


def test_the_prediction_takes_the_median_of_samples_between_the_engines_steps(tmp_path):
  """T_C is sampled once before the engine and after each of its timed
  steps; one slow moment among the samples does not move the prediction."""
  config = _tiny_config(steps=2)
  config.plan.repeats = 3
  taken = []

  class Drifting(FakeMeasurements):
    class ComputeTimer(FakeMeasurements.ComputeTimer):
      def median_s(self, repeats):
        taken.append(repeats)
        return (0.050, 0.500, 0.040)[len(taken) - 1]

  predictor = study.Predictor(config, measurements=Drifting())
  study.run_cells(config, str(tmp_path), validation.check_study_cell,
                  measure_step=_engine_off_by(1.0), predictor=predictor)
  [row] = [json.loads(l) for l in (tmp_path / 'study.jsonl').read_text().splitlines()]
  # plan.repeats before the engine, one run per sample between its steps.
  assert taken == [3, 1, 1]
  assert row['compute_s_planned'] == 0.050
  assert row['predicted_step_s'] == pytest.approx(TRUE_STEP_S)


def test_each_sample_counts_the_kernel_cpu_of_the_workers_program(monkeypatch, tmp_path):
  """The row keeps the median kernel CPU per run of T_C's program over the
  samples: the cost of faulting in fresh memory, which the formula leaves out."""
  config = _tiny_config(steps=2)
  config.plan.repeats = 3
  kernel = [0.0]
  monkeypatch.setattr(study.timing, 'process_cpu_s', lambda: (0.0, kernel[0]))
  per_run = iter([0.010, 0.900, 0.020])  # one slow sample among three

  class Faulting(FakeMeasurements):
    class ComputeTimer(FakeMeasurements.ComputeTimer):
      def median_s(self, repeats):
        kernel[0] += next(per_run) * (repeats + 1)  # timing's untimed run too
        return 0.050

  predictor = study.Predictor(config, measurements=Faulting())
  study.run_cells(config, str(tmp_path), validation.check_study_cell,
                  measure_step=_engine_off_by(1.0), predictor=predictor)
  [row] = [json.loads(l) for l in (tmp_path / 'study.jsonl').read_text().splitlines()]
  assert row['compute_kernel_cpu_s_planned'] == pytest.approx(0.020)
  assert row['predicted_step_s'] == pytest.approx(TRUE_STEP_S)  # not a term of it
  text = (tmp_path / 'study.md').read_text()
  assert '| kernel CPU s/step | kernel CPU s/T_C run |' in text
  assert '| - | 0.020 |' in text  # the fake engine reports no step CPU
  assert 'mean signed error +0.0%; 1 of 1 cells within 15%' in text


def test_a_new_model_drops_the_timers_of_the_one_before():
  config = _tiny_config()
  built, closed = [], []

  class Counting(FakeMeasurements):
    class ComputeTimer(FakeMeasurements.ComputeTimer):
      def __init__(self, exp, num_workers, per_worker_batch):
        super().__init__(exp, num_workers, per_worker_batch)
        built.append(exp.model_name)

    class HostTimer(FakeMeasurements.HostTimer):
      def close(self):
        closed.append('host')

  predictor = study.Predictor(config, measurements=Counting())
  for model in ('resnet18', 'resnet18', 'vgg16', 'resnet18'):
    cell = {'engine': 'ps', 'model': model, 'num_workers': 2, 'batch_size': 8,
            'bandwidth_gbps': 1.0, 'num_shards': 1}
    predictor.measure_now(types.SimpleNamespace(config=config, model_name=model), cell)
  # resnet18's timers are built again after vgg16's cells: they were dropped,
  # and each model's host timer was closed when the next model came.
  assert built == ['resnet18', 'vgg16', 'resnet18']
  assert closed == ['host', 'host']


def test_the_host_overheads_add_to_the_formula_as_a_named_term():
  config = _tiny_config()

  class Overheads(FakeMeasurements):
    class HostTimer(FakeMeasurements.HostTimer):
      def median_s(self, repeats):
        # The host takes 8 ms to move a direction's bytes (the link: 16 ms),
        # 3 ms for the device copies and 1 ms of bookkeeping.
        return {'update_s': 0.010, 'push_s': 0.008, 'pull_s': 0.008,
                'device_copies_s': 0.003, 'bookkeeping_s': 0.001}

  predictor = study.Predictor(config, measurements=Overheads())
  cell = {'engine': 'ps', 'model': 'resnet18', 'num_workers': 2, 'batch_size': 8,
          'bandwidth_gbps': 1.0, 'num_shards': 1}
  exp = types.SimpleNamespace(config=config)
  row = predictor.predict(exp, cell, predictor.measure_now(exp, cell))
  # Each 1 MB message's first quarter (its first chunk) is copied before the
  # link starts on it: 2 ms of each direction's 8 ms show.
  assert row['overhead_s_planned'] == pytest.approx(2 * 0.002 + 0.001)
  assert row['predicted_step_s'] == pytest.approx(TRUE_STEP_S + 0.003 + 0.005)
  assert row['communication_s_planned'] == pytest.approx(0.032)
  assert row['host_copies_s_planned'] == pytest.approx(0.003)


class RingMeasurements(FakeMeasurements):
  """The all-reduce engine's host work, fixed: 4 ms of ring work on
  unlimited links, 3 ms of device copies, a 7 ms update, 1 ms of bookkeeping."""

  class AllReduceHostTimer:
    def __init__(self, exp, num_workers, devices_per_host, algorithm):
      del exp, num_workers, devices_per_host, algorithm

    def median_s(self, repeats):
      del repeats
      return {'ring_s': 0.004, 'device_copies_s': 0.003, 'update_s': 0.007,
              'bookkeeping_s': 0.001}

    def close(self):
      pass


def test_the_all_reduce_prediction_adds_the_ring_to_the_host_work():
  config = _tiny_config(engines='allreduce')
  predictor = study.Predictor(config, measurements=RingMeasurements())
  cell = {'engine': 'allreduce', 'model': 'resnet18', 'num_workers': 2, 'batch_size': 8,
          'bandwidth_gbps': 1.0, 'devices_per_host': 1, 'algorithm': 'ring'}
  exp = types.SimpleNamespace(config=config)
  row = predictor.predict(exp, cell, predictor.measure_now(exp, cell))
  # 2 ring steps of 0.5 MB at 1 Gbit/s: 4 ms each on the links. The host's
  # 4 ms of ring work is 2 ms a step, of which the first chunk's half (0.25
  # of 0.5 MB) shows: 5 ms a step.
  assert row['communication_s_planned'] == pytest.approx(0.008)
  assert row['predicted_step_s'] == pytest.approx(0.050 + 0.003 + 2 * 0.005 + 0.007 + 0.001)
  assert row['overhead_s_planned'] == pytest.approx(2 * 0.001 + 0.001)


@pytest.mark.parametrize('algorithm,per_host,expected', [
    # 4 workers, 1 MB, NICs of 1 Gbit/s (125 MB/s), unlimited ports.
    ('ring', 1, [(6, 0.25 * MB, 0.002)]),
    ('ring', 2, [(6, 0.25 * MB, 0.002)]),  # only edges between hosts cross NICs
    ('ring', 4, [(6, 0.25 * MB, 0.0)]),  # one host: no NIC at all
    # inside (S/2 over the ports), 2 steps of 2 rings of 0.25 MB through one NIC, inside
    ('hierarchical', 2, [(1, 0.5 * MB, 0.0), (2, 0.25 * MB, 0.004), (1, 0.5 * MB, 0.0)]),
    ('hierarchical', 1, [(6, 0.25 * MB, 0.002)]),  # hosts of one: a flat ring of hosts
])
def test_the_ring_steps_over_emulated_hosts(algorithm, per_host, expected):
  hosts = lambda g, intra=math.inf: cluster_model.Cluster(
      num_hosts=4 // g, devices_per_host=g, nic_bandwidth=GBIT, intra_bandwidth=intra)
  phases = cluster_model.allreduce_phases(1 * MB, hosts(per_host), algorithm)
  assert [(c, pytest.approx(m), pytest.approx(t)) for c, m, t, _ in phases] == expected
  # A slow fabric inside the host sets the pace of the steps that cross it.
  [(_, _, inside, _)] = cluster_model.allreduce_phases(1 * MB, hosts(2, GBIT / 4), 'ring')
  assert inside == pytest.approx(0.008)
  one = cluster_model.Cluster(num_hosts=1, devices_per_host=1, nic_bandwidth=GBIT)
  assert cluster_model.allreduce_phases(1 * MB, one, 'ring') == []


class FakeEngine:
  """Steps that record given phase times; nothing runs."""
  step_phases = ('compute_s', 'allreduce_s', 'update_s', 'wait_s')

  def __init__(self, exp):
    del exp
    self.batch_sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    self.steps, self.closed, self._records = 0, False, []

  def start(self, state, meta=None):
    del state, meta

  def step(self, batch):
    del batch
    self.steps += 1
    self._records.append({'compute_s': float(self.steps), 'allreduce_s': 0.5,
                          'update_s': 0.25, 'wait_s': 0.0, 'loss': 1.0})

  def collect_metrics(self):
    records, self._records = self._records, []
    return records

  def close(self):
    self.closed = True


def test_a_step_is_split_into_the_phases_its_engine_names(monkeypatch, tmp_path):
  config = _tiny_config()
  cell = {'engine': 'allreduce', 'model': 'resnet18', 'num_workers': 2, 'batch_size': 8,
          'bandwidth_gbps': 1.0}
  from trainer import experiment  # pylint: disable=g-import-not-at-top
  exp = experiment.build_experiment(study.cell_config(config, cell), str(tmp_path))
  monkeypatch.setattr(state_lib, 'create_train_state', lambda *args: None)
  engines = []
  def create(exp_):
    engines.append(FakeEngine(exp_))
    return engines[0]
  between = []
  # The process's (user, kernel) CPU clock, read before every step and
  # after each timed one: the timed steps use 0.4 s and 0.2 s of user time,
  # 0.1 s and 0.3 s of kernel time.
  clock = iter([(0.0, 0.0), (0.0, 0.0), (1.0, 0.5), (1.4, 0.6), (2.0, 1.0), (2.2, 1.3)])
  monkeypatch.setattr(study.timing, 'process_cpu_s', lambda: next(clock))
  _, split = study.measure_step_s(exp, 2, create_engine=create,
                                  between=lambda: between.append(engines[0].steps))
  # The planner's samples run after each timed step, never after a warm-up one.
  assert between == [study._WARMUP_STEPS + 1, study._WARMUP_STEPS + 2]  # pylint: disable=protected-access
  assert list(split)[:len(FakeEngine.step_phases)] == list(FakeEngine.step_phases)
  assert split['step_user_cpu_s'] == pytest.approx(0.3)
  assert split['step_kernel_cpu_s'] == pytest.approx(0.2)
  assert len(split['steps_s']) == 2
  # The timed steps follow the warm-up ones: compute_s counts the steps.
  first = study._WARMUP_STEPS + 1  # pylint: disable=protected-access
  assert split['compute_s'] == pytest.approx(first + 0.5)
  assert split['allreduce_s'] == 0.5
  assert engines[0].steps == study._WARMUP_STEPS + 2 and engines[0].closed  # pylint: disable=protected-access


def test_every_setting_runs_under_each_engine_and_old_rows_rerun(tmp_path):
  config = _tiny_config(engines='ps,allreduce', num_shards='1,2', num_workers='2,4')
  cells = study.grid(config)
  assert [(c['engine'], c['num_workers'], c.get('num_shards')) for c in cells] == [
      ('ps', 2, 1), ('ps', 2, 2), ('allreduce', 2, None),
      ('ps', 4, 1), ('ps', 4, 2), ('allreduce', 4, None)]
  assert study.cell_config(config, cells[2]).engine == 'allreduce'
  assert study.cell_config(config, cells[1]).ps.num_shards == 2
  # A row of a study from before study.engines names no engine: it matches
  # no cell, so the cell runs again.
  old = {k: v for k, v in cells[0].items() if k != 'engine'}
  (tmp_path / 'study.jsonl').write_text(json.dumps({'cell': old}) + '\n')
  done = study.load_results(str(tmp_path))
  assert [c for c in cells if study.cell_key(c) in done] == []


# --- The report ----------------------------------------------------------------

def _row(engine='ps', model='resnet18', n=4, n_ps=1, bandwidth=1.0, batch=64,
         measured=0.1, predicted=0.1, compute=0.05, communication=0.01):
  cell = {'engine': engine, 'model': model, 'num_workers': n, 'batch_size': batch,
          'bandwidth_gbps': bandwidth}
  if engine == 'ps':
    cell['num_shards'] = n_ps
  return {'cell': cell, 'measured_step_s': measured, 'predicted_step_s': predicted,
          'error': (predicted - measured) / measured, 'compute_s_planned': compute,
          'communication_s_planned': communication, 'direction_s_planned': communication / 2,
          'model_bytes': 1e6, 'images_per_sec': batch / measured,
          'allreduce_step_s_predicted': 123.0}


def test_mape_is_reported_for_link_bound_and_compute_bound_cells(tmp_path):
  rows = [
      # Link-bound: the predicted link time exceeds the predicted T_C.
      _row(measured=0.2, predicted=0.22, communication=0.12),   # +10%
      _row(measured=0.2, predicted=0.18, communication=0.06, n_ps=2),   # -10%
      # Compute-bound.
      _row(measured=0.1, predicted=0.07, communication=0.01, n_ps=4),   # -30%
      _row(engine='allreduce', measured=0.1, predicted=0.11, communication=0.02),  # +10%
  ]
  summary = report.write_study(rows, str(tmp_path))
  assert summary['mape_percent'] == pytest.approx(15.0)
  assert summary['link_bound_cells'] == 2 and summary['compute_bound_cells'] == 2
  assert summary['mape_link_bound_percent'] == pytest.approx(10.0)
  assert summary['mape_compute_bound_percent'] == pytest.approx(20.0)
  assert summary['mape_percent_by_engine'] == pytest.approx({'ps': 50 / 3, 'allreduce': 10.0})
  study_md = (tmp_path / 'study.md').read_text()
  assert report.LINK_BOUND_DEFINITION in study_md
  assert '| ps | 16.7% (3) | 10.0% (2) | 30.0% (1) |' in study_md
  assert '| all engines | 15.0% (4) | 10.0% (2) | 20.0% (2) |' in study_md
  assert '## Cells: ps' in study_md and '## Cells: allreduce' in study_md


def test_a_study_of_one_kind_of_cell_reports_no_mape_for_the_other(tmp_path):
  summary = report.write_study([_row(communication=0.01)], str(tmp_path))
  assert summary['mape_link_bound_percent'] is None and summary['link_bound_cells'] == 0
  json.dumps(summary, allow_nan=False)  # main prints it as JSON


def _contrast(ps_over_ring: dict) -> list[dict]:
  """PS cells at N_ps = 1, 2, 4 for 4 workers, each with the given measured
  step relative to the all-reduce cell of the same setting (0.1 s)."""
  rows = [_row(engine='allreduce', measured=0.1)]
  rows += [_row(n_ps=n_ps, measured=0.1 * ratio) for n_ps, ratio in ps_over_ring.items()]
  return rows


def test_the_all_reduce_finding_compares_two_measurements():
  claim, supported, evidence = report.findings(_contrast({1: 3.0, 2: 1.6, 4: 1.05}))[-1]
  assert claim.startswith('All-reduce matches PS only when N_ps is comparable to N_w')
  assert supported
  assert 'all-reduce measured' in evidence and '0.05 with N_ps >= N_w (1 cells)' in evidence
  # The measurement decides, not the planner's ring formula (123 s in every
  # row): where PS with as many shards as workers is far from all-reduce,
  # the finding is not supported.
  _, supported, _ = report.findings(_contrast({1: 1.0, 2: 1.1, 4: 3.0}))[-1]
  assert not supported


def test_rows_from_before_the_engines_key_still_report():
  rows = [_row(n_ps=n_ps, measured=0.1 * ratio, predicted=0.1 * ratio)
          for n_ps, ratio in ((1, 3.0), (4, 1.0))]
  for r in rows:
    del r['cell']['engine'], r['communication_s_planned']
    r['allreduce_step_s_predicted'] = 0.1
  _, supported, evidence = report.findings(rows)[-1]
  assert supported and 'ring all-reduce predicted' in evidence
  assert report.mape_split(rows)['all'] == (pytest.approx(0.0), 2)
  assert np.isclose(report.communication_s(rows[0]), 0.01)


def test_a_direction_shows_the_part_of_the_host_copying_before_the_link_starts():
  # 1 MB messages in 0.25 MB chunks: a quarter of the host's 8 ms comes
  # before the link's 16 ms; a message of one chunk waits for all of it.
  share = formulas.first_chunk_share(1 * MB, 0.25 * MB)
  assert share == 0.25 and formulas.first_chunk_share(0.1 * MB, 0.25 * MB) == 1.0
  assert formulas.emulated_direction_s(0.016, 0.008, share) == pytest.approx(0.018)
  assert formulas.emulated_direction_s(0.002, 0.008, 1.0) == pytest.approx(0.010)
  # A host slower than the link sets the time; no share: the old max.
  assert formulas.emulated_direction_s(0.002, 0.008, 0.1) == pytest.approx(0.008)
  assert formulas.emulated_direction_s(0.016, 0.008) == pytest.approx(0.016)


def test_a_grid_over_hosts_runs_each_algorithm_where_hosts_hold_several_workers():
  config = _tiny_config(engines='ps,allreduce', devices_per_host='1,2',
                        allreduce_algorithms='ring,hierarchical')
  cells = study.grid(config)
  rings = [(c['devices_per_host'], c['algorithm']) for c in cells if c['engine'] == 'allreduce']
  assert rings == [(1, 'ring'), (2, 'ring'), (2, 'hierarchical')]
  assert [c['devices_per_host'] for c in cells if c['engine'] == 'ps'] == [1, 2]
  assert study.cell_config(config, cells[-1]).network.devices_per_host == 2
  assert study.cell_config(config, cells[-1]).allreduce.algorithm == 'hierarchical'


@pytest.mark.parametrize('key,value,message', [
    ('devices_per_host', '0', 'study.devices_per_host='),
    ('allreduce_algorithms', 'ring,tree', "study.allreduce_algorithms='tree'"),
    ('allreduce_algorithms', ' ', 'names no algorithm'),
])
def test_bad_host_grids_are_refused_in_one_line(key, value, message):
  from core.errors import UsageError  # pylint: disable=g-import-not-at-top
  with pytest.raises(UsageError) as error:
    validation.check_config(_tiny_config(**{key: value}))
  assert message in str(error.value) and '\n' not in str(error.value)
