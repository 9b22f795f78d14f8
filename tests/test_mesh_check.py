"""benchmarks/mesh_check.py's summaries: the rank correlation (held against
scipy's), the spread of a cell's timed steps, the floor of the costing's
form, and the probe taken again after the cells."""

import json
import os
import sys

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), 'benchmarks'))
import mesh_check  # pylint: disable=g-import-not-at-top,wrong-import-position


def _cell(flops, nbytes, comm, measured, steps=None, name='c', chosen=False):
  return {'layout': '1x8', 'model': 'm', 'global_batch': 32, 'configuration': name,
          'chosen': chosen, 'flops': flops, 'bytes_accessed': nbytes,
          'predicted_communication_s': comm, 'predicted_step_s': measured,
          'measured_step_s': measured, 'measured_steps_s': steps or [measured],
          'error': 0.0, 'planned_peak_bytes': 1, 'trainer_peak_bytes': 1}


def test_the_rank_correlation_is_scipys():
  rng = np.random.default_rng(0)
  xs, ys = rng.random(12).tolist(), rng.random(12).tolist()
  assert mesh_check._spearman(xs, ys) == pytest.approx(stats.spearmanr(xs, ys).statistic)


def test_the_floor_recovers_weights_that_make_the_steps_exactly():
  rng = np.random.default_rng(1)
  weights = (2e-9, 5e-10, 1.5, 0.01)
  rows = []
  for _ in range(10):
    f, b, c = rng.uniform(1e8, 1e9), rng.uniform(1e7, 1e8), rng.uniform(0.001, 0.05)
    rows.append(_cell(f, b, c, weights[0] * f + weights[1] * b + weights[2] * c + weights[3]))
  floor = mesh_check.form_floor(rows)
  assert floor['mape'] == pytest.approx(0.0, abs=1e-9)
  assert list(floor['weights'].values()) == pytest.approx(weights, rel=1e-6)
  assert floor['cells'] == 10


def test_the_floor_of_steps_no_weighting_tells_apart_is_least_squares_of_relative_error():
  # The same terms measured 1 s and 3 s: the least squares of x/1 - 1 and
  # x/3 - 1 put both at x = 1.2 s, 20% and 60% off.
  rows = [_cell(1.0, 1.0, 1.0, 1.0), _cell(1.0, 1.0, 1.0, 3.0)]
  floor = mesh_check.form_floor(rows)
  assert floor['mape'] == pytest.approx(0.4)
  assert floor['worst_error'] == pytest.approx(0.6)


def test_a_groups_step_spread_is_the_median_cells_relative_deviation():
  rows = [_cell(1, 1, 0, 2.0, steps=[1.0, 3.0], chosen=True),  # pstdev 1, over 2
          _cell(1, 1, 0, 10.0, steps=[10.0, 10.0], name='d'),
          _cell(1, 1, 0, 4.0, steps=[3.0, 5.0], name='e')]  # pstdev 1, over 4
  summary = mesh_check.summary(rows)
  assert summary['step_spread'] == pytest.approx(0.25)
  assert summary['chosen'] == 'c' and summary['measured_fastest'] == 'c'


def test_a_repeat_is_compared_cell_by_cell_with_its_latest_earlier_measurement(tmp_path):
  path = tmp_path / 'check.jsonl'
  first = [{**_cell(1, 1, 0, 2.0, name=n), 'kind': 'candidate', 'date': 'd1', 'commit': 'a'}
           for n in ('c', 'd')]
  second = [{**r, 'date': 'd2', 'commit': 'b', 'measured_step_s': 4.0,
             'predicted_step_s': 3.0} for r in first]
  # A later run of another layout does not hide the cells' own latest run.
  other = [{**first[0], 'layout': '1x2', 'date': 'd3', 'commit': 'c'}]
  path.write_text(''.join(json.dumps(r) + '\n' for r in first + second + other
                          + [{'kind': 'group', 'date': 'd3'}]))
  earlier = mesh_check.earlier_cells(str(path))
  assert sorted((r['layout'], r['configuration'], r['date']) for r in earlier) == [
      ('1x2', 'c', 'd3'), ('1x8', 'c', 'd2'), ('1x8', 'd', 'd2')]
  now = [_cell(1, 1, 0, 5.0, name='c'), _cell(1, 1, 0, 1.0, name='new')]
  moved = mesh_check.against_earlier(now, earlier)
  # Only 'c' was run before: measured 4 -> 5 s, predicted 3 -> 5 s.
  assert moved['repeat_cells'] == 1
  assert moved['repeat_measured_difference'] == pytest.approx(0.25)
  assert moved['repeat_predicted_difference'] == pytest.approx(2 / 3)
  assert moved['earlier_run'] == {'date': 'd2', 'commit': 'b'}
  assert mesh_check.earlier_cells(str(tmp_path / 'none.jsonl')) == []
  assert mesh_check.against_earlier(now, [])['repeat_measured_difference'] is None


def test_the_probe_after_the_cells_is_held_against_the_cells_and_the_first_probe():
  rows = [dict(_cell(1, 1, 0, 2.0, chosen=True), predicted_step_s=1.0, predicted_after_step_s=1.5),
          dict(_cell(1, 1, 0, 4.0, name='d'), predicted_step_s=4.0, predicted_after_step_s=5.0),
          # Planned at another rung from the second probe: not compared.
          dict(_cell(1, 1, 0, 8.0, name='e'), predicted_step_s=8.0, predicted_after_step_s=None)]
  summary = mesh_check.summary(rows)
  # |1.5/2 - 1| = 0.25 and |5/4 - 1| = 0.25; moved 0.5 and 0.25.
  assert summary['mape_probe_after'] == pytest.approx(0.25)
  assert summary['probe_after_moved'] == pytest.approx(0.375)
  assert mesh_check.from_the_probe_after(rows[2:]) == {'mape_probe_after': None,
                                                      'probe_after_moved': None}
  point = lambda b, wire, tree: {'per_device_batch': b, 'compute_s': wire,
                                  'tree_compute_s': tree, 'flops': 1e9 * b}
  before = {'compute_points': [point(4, 1.0, 2.0), point(8, 1.0, 4.0)]}
  after = {'compute_points': [point(4, 9.0, 3.0), point(8, 9.0, 4.0), point(16, 9.0, 9.0)]}
  # The gradients as a tree: 2 -> 3 s and 4 -> 4 s; 16 was not probed before.
  assert mesh_check.compute_moved(before, after) == pytest.approx(0.25)
