"""The planner against published clusters (benchmarks/published_clusters.py):
every input labelled, the committed predictions and score what the formulas
and the inputs give, and the docs stating what the committed results hold."""

import json
import os
import re
import sys

import pytest

from configs import default
from core.errors import UsageError
from planner import cluster_model as cm
from planner import plan as plan_mode
from planner import recommend

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
import published_clusters as script  # pylint: disable=g-import-not-at-top,wrong-import-position

RESULTS = os.path.join(REPO, 'results', 'published_clusters', 'results.jsonl')
DOC = os.path.join(REPO, 'docs', 'published-clusters.md')
LABELS = ('published', 'derived', 'estimated')
MB = 1e6


@pytest.fixture(scope='module')
def inputs():
  with open(script.INPUTS) as f:
    return json.load(f)


@pytest.fixture(scope='module')
def committed():
  with open(RESULTS) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return ([r for r in records if 'case' in r],
          [r for r in records if r.get('summary') == 'score'])


def _fresh(inputs):
  return [script.predict(case, model, inputs['shared'], inputs['explanations'])
          for case in inputs['cases'] for model in case['models']]


def _labelled_entries(inputs):
  entries = list(inputs['shared'].values())
  for case in inputs['cases']:
    entries += [v for v in case.values() if isinstance(v, dict)]
    for model in case['models']:
      entries += [v for v in model.values() if isinstance(v, dict)]
  return entries


def test_every_input_is_labelled_published_derived_or_estimated_with_its_source(inputs):
  entries = _labelled_entries(inputs)
  assert len(entries) > 60  # every case's and model's inputs are read
  for entry in entries:
    assert entry['status'] in LABELS, entry
    assert entry['source'], entry
    if entry['status'] != 'published':  # the arithmetic, or how it was estimated
      assert entry['how'], entry


def test_the_inputs_are_labelled_no_firmer_than_their_sources(inputs):
  cases = {c['case']: c for c in inputs['cases']}
  # The 512-GPU chart states no batch: it comes from the 16-GPU command.
  assert cases['horovod_512']['per_device_batch']['status'] == 'estimated'
  # The maintainer says grpc + parameter_server, not how a server's GPUs push.
  assert cases['horovod_16_ps']['strategy']['status'] == 'estimated'
  assert 'each GPU pushes' not in cases['horovod_16_ps']['system']
  # Parameter counts of Keras models, times 4 bytes.
  for case in cases.values():
    for model in case['models']:
      assert model['model_bytes']['status'] == 'derived', model['model']
  # The ring inside a K80 host stands in for a gather onto one device.
  assert 'modelling choice' in cases['tensorflow_k80_ps']['strategy']['how']


def test_a_case_that_overlaps_states_its_backprop_share_and_where_it_comes_from(inputs):
  for case in inputs['cases']:
    if not case['overlap']['value']:
      continue
    share = case['backprop_share']
    assert 0 < share['value'] <= 1
    assert share['status'] in LABELS and share['source'] and share['how'], case['case']
    if share['status'] == 'estimated':  # no timing published: the FLOP split
      assert share['value'] == pytest.approx(cm.BACKPROP_SHARE)
      assert 'FLOP split' in share['how']
  # Goyal et al. state backprop at 120 ms of the 232 ms step.
  goyal = next(c for c in inputs['cases'] if c['case'] == 'goyal2017')
  assert goyal['backprop_share']['status'] == 'derived'
  assert goyal['backprop_share']['value'] == pytest.approx(0.120 / 0.232, abs=1e-4)
  assert goyal['models'][0]['compute_s']['value'] == 0.232


def test_the_committed_predictions_are_what_the_formulas_give(inputs, committed):
  records, _ = committed
  fresh = _fresh(inputs)
  assert [(r['case'], r['model']) for r in records] == [(r['case'], r['model']) for r in fresh]
  for old, new in zip(records, fresh):
    for key in ('predicted_efficiency', 'published_efficiency', 'difference_points',
                'second_efficiency', 'backprop_share'):
      assert old[key] == pytest.approx(new[key]), (new['case'], new['model'], key)
    assert (old['why'], old['within'], old['estimated_inputs']) == (
        new['why'], new['within'], new['estimated_inputs'])
    # Every miss says why; no prediction within the bar does.
    assert new['within'] == (new['why'] is None)
  by_case = {(r['case'], r['model']): r['predicted_efficiency'] for r in fresh}
  # The communication-heavy model comes out clearly below the other two.
  assert by_case[('horovod_512', 'VGG-16')] < min(
      by_case[('horovod_512', 'Inception V3')], by_case[('horovod_512', 'ResNet-101')]) - 0.1


def test_a_second_prediction_at_line_rate_is_the_line_rate_prediction(inputs):
  goyal = json.loads(json.dumps(next(c for c in inputs['cases'] if c['case'] == 'goyal2017')))
  goyal['second_prediction']['nic_gbps'] = goyal['nic_gbps']['value']
  record = script.predict(goyal, goyal['models'][0], inputs['shared'], {})
  assert record['second_efficiency'] == record['predicted_efficiency']
  # A NIC of a hundredth of the bandwidth no longer hides the all-reduce.
  goyal['second_prediction']['nic_gbps'] = goyal['nic_gbps']['value'] / 100
  slow = script.predict(goyal, goyal['models'][0], inputs['shared'], {})
  assert slow['second_efficiency'] < 0.5


@pytest.mark.parametrize('points, inside', [
    (10.0, True), (9.999999999999998, True), (10.000000000000009, True), (-10.04, True),
    (10.06, False), (-10.2, False), (0.0, True)])
def test_within_compares_the_difference_rounded_to_a_tenth_of_a_point(points, inside):
  assert script.within(points) is inside


def _published(model, devices):
  figure = model['published']
  if 'efficiency' in figure:
    return figure['efficiency']
  return figure['images_per_sec'] / (devices * figure['one_device_images_per_sec'])


def test_the_score_and_the_always_100_baseline_are_recomputed_from_the_inputs(
    inputs, committed):
  records, (score,) = committed
  published, second = [], []
  for case in inputs['cases']:
    devices = case['num_hosts']['value'] * case['devices_per_host']['value']
    for model in case['models']:
      published.append(_published(model, devices))
      basis = model.get('second_prediction', case.get('second_prediction'))
      if basis:
        second.append(basis)
  assert [r['published_efficiency'] for r in records] == pytest.approx(published)
  planner = [100 * (r['predicted_efficiency'] - p) for r, p in zip(records, published)]
  always = [100 * (1 - p) for p in published]
  for name, points in (('planner', planner), ('always_100', always)):
    stats = score[name]
    assert stats['predictions'] == len(points) == 13
    assert stats['within'] == sum(round(abs(p), 1) <= 10 for p in points)
    assert stats['mean_signed_points'] == pytest.approx(sum(points) / len(points))
    assert stats['mean_absolute_points'] == pytest.approx(
        sum(map(abs, points)) / len(points))
  assert score['second']['predictions'] == len(second)
  fresh = script.score(_fresh(inputs))
  for name in ('planner', 'always_100', 'second'):
    assert score[name] == pytest.approx(fresh[name]), name
  # Every miss over-predicts: the line-rate model is a bound from above.
  assert all(p > 0 for p in planner if round(abs(p), 1) > 10)


def _doc_section() -> str:
  with open(DOC) as f:
    return f.read()


def test_the_doc_states_the_score_and_each_prediction_the_results_hold(committed):
  records, (score,) = committed
  section = _doc_section()
  names = {'the planner at line rate': 'planner', 'always 100%': 'always_100',
           'second predictions': 'second'}
  rows = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if cells[0] in names:
      rows[names[cells[0]]] = cells[1:]
  assert set(rows) == set(names.values())
  for name, cells in rows.items():
    stats = score[name]
    assert cells == [f'{stats["within"]} of {stats["predictions"]}',
                     f'{stats["mean_signed_points"]:+.1f}',
                     f'{stats["mean_absolute_points"]:.1f}'], name
  # The per-prediction table: its points column, in the records' order.
  table = [[c.strip() for c in line.strip().strip('|').split('|')]
           for line in section.splitlines() if line.startswith('| ')]
  points = [cells[6] for cells in table if len(cells) == 9 and '%' in cells[4]]
  assert points == [f'{r["difference_points"]:+.1f}' for r in records]
  counts = re.findall(r'(\d+) of (\d+) predictions', section)
  assert counts and all((int(a), int(b)) == (score['planner']['within'], len(records))
                        for a, b in counts)


def test_the_changelog_states_the_committed_count(committed):
  records, (score,) = committed
  with open(os.path.join(REPO, 'CHANGELOG.md')) as f:
    stated = re.findall(r'(\d+) of (\d+) predictions within 10 points', f.read())
  assert stated == [(str(score['planner']['within']), str(len(records)))]


# --- plan.backprop_share: the planner's share of T_C behind which overlap hides.

def test_the_default_backprop_share_is_the_flop_split():
  assert default.get_config().plan.backprop_share == cm.BACKPROP_SHARE == 2 / 3


@pytest.mark.parametrize('share', [0.0, -0.5, 1.01, float('nan'), float('inf')])
def test_a_backprop_share_outside_zero_to_one_is_refused(share):
  plan = default.get_config().plan
  plan.backprop_share = share
  with pytest.raises(UsageError, match=r'plan\.backprop_share=.* must be in \(0, 1\]'):
    plan_mode.backprop_share(plan)


def test_the_plan_hides_communication_behind_the_share_it_is_given():
  # 8 hosts of 1 device on 1 Gbit/s, 100 MB, T_C 1 s: the ring takes 1.4 s.
  cluster = cm.Cluster(8, 1, 1e9 / 8)
  comm = cm.allreduce_s(100 * MB, cluster, 'ring')
  kw = dict(placement='dedicated', update_s=0.0, overlap=True)
  default_share = recommend.evaluate('ring', 1.0, 100 * MB, cluster, **kw)
  half = recommend.evaluate('ring', 1.0, 100 * MB, cluster, overlap_share=0.5, **kw)
  assert default_share['step_s'] == pytest.approx(1 / 3 + comm)
  assert half['step_s'] == pytest.approx(0.5 + comm)
