"""Planning from a probe (plan.probe, planner/from_probe.py): the step's
arithmetic from probe.json alone, errors in the probe carried into the
prediction, and --mode=plan reading a probe."""

import copy
import json

import pytest

from core import units
from core.errors import UsageError
from planner import from_probe
from tests.helpers import run_main

GBPS = 8.0  # bus bandwidth of the fake network, Gbit/s: 1e9 bytes/s


def _probe(compute_s=0.100, per_operand_s=0.002, busbw_gbps=GBPS, fixed_s=0.010,
           update_s=0.005, count=5, nbytes=4e6, devices=4):
  """A probe.json of `devices` one-device hosts, every figure chosen."""
  return {
      'schema_version': 2,
      'provenance': {'device_count': devices, 'date': '2026-12-02T00:00:00Z'},
      'model': {'name': 'resnet18', 'width': 4, 'image_size': 16},
      'hosts': {'devices_per_host': [1] * devices},
      'collectives': {
          'intra_host': {'measured': False, 'reason': 'one device a host'},
          'inter_host': {'measured': False, 'reason': 'not needed here'},
          'all_devices': {'measured': True, 'participants': devices,
                          'all_reduce': {'latency_s': 0.001, 'busbw_gbps': busbw_gbps}}},
      'step_fixed_cost': {'participants': devices, 'fixed_cost_s': fixed_s,
                          'per_operand_s': per_operand_s},
      'compute': {'points': [{'per_device_batch': 8, 'compute_s': compute_s},
                             {'per_device_batch': 16, 'compute_s': 2 * compute_s}]},
      'update': {'update_s': update_s},
      'step_program': {'count': 1, 'operands': count, 'bytes': nbytes},
  }


def test_the_step_adds_compute_update_fixed_cost_arrays_and_bytes():
  parts = from_probe.step_parts(_probe(), 8)
  bytes_s = 4e6 * 2 * 3 / 4 / units.gbps_to_bytes_per_s(GBPS)
  assert parts == pytest.approx({
      'compute_s': 0.100, 'update_s': 0.005, 'fixed_s': 0.010,
      'arrays_s': 5 * 0.002,  # 5 arrays in the step's collectives, 2 ms each
      'bandwidth_s': bytes_s,
      'step_s': 0.100 + 0.005 + 0.010 + 0.010 + bytes_s})
  # The chained all-reduces' latency is reported, not used: a step pays the
  # tiny steps' per-array cost.
  other_latency = _probe()
  other_latency['collectives']['all_devices']['all_reduce']['latency_s'] = 1.0
  assert from_probe.step_parts(other_latency, 8) == parts
  # More devices of the same kind: a ring's per-array cost grows with its steps.
  eight = from_probe.step_parts(_probe(), 8, num_devices=8)
  assert eight['arrays_s'] == pytest.approx(5 * 0.002 * 7 / 3)
  assert eight['bandwidth_s'] == pytest.approx(4e6 * 2 * 7 / 8 / 1e9)
  assert from_probe.step_parts(_probe(), 16, num_devices=1)['step_s'] == pytest.approx(0.205)


def test_the_step_computes_its_gradients_as_a_tree_where_the_probe_timed_that():
  """An SPMD step holds the parameters as their tree: the probe's timing of
  that program is its T_C; the parameter-server workers' program, which
  also packs them in one vector, only stands in for an older probe."""
  probe = _probe()
  for q, tree_s in zip(probe['compute']['points'], (0.080, 0.150)):
    q['tree_compute_s'] = tree_s
  wire = from_probe.step_parts(_probe(), 16)
  tree = from_probe.step_parts(probe, 16)
  assert tree['compute_s'] == 0.150 and wire['compute_s'] == 0.200
  assert wire['step_s'] - tree['step_s'] == pytest.approx(0.050)
  assert 'tree_compute_s' in from_probe.sources(probe)['compute_s']


def _sized_probe():
  """_probe()'s, whose step costs were also timed at arrays of 4 kB, 64 kB
  and 1 MiB: 1 ms, then 3 ms an array beyond its bytes at 1e9 bytes/s."""
  probe = _probe()
  bandwidth = lambda size: size * 2 * 3 / 4 / 1e9  # a ring of the 4 devices
  probe['step_fixed_cost'].update(mean_array_bytes=600, per_operand_s=0.0002, by_array_bytes=[
      {'array_bytes': 4096, 'per_operand_s': 0.001 + bandwidth(4096)},
      {'array_bytes': 65536, 'per_operand_s': 0.003 + bandwidth(65536)},
      {'array_bytes': 1 << 20, 'per_operand_s': 0.003 + bandwidth(1 << 20)}])
  probe['step_program'].update(operands=16, bytes=600 * 10 + 16384 * 4 + (1 << 20) * 2,
                               arrays_by_bytes=[[600, 10], [16384, 4], [1 << 20, 2]])
  return probe


def test_each_array_costs_what_the_probe_timed_for_arrays_of_its_size():
  probe = _sized_probe()
  points = from_probe.array_cost_points(probe)
  assert [size for size, _ in points] == [600, 4096, 65536, 1 << 20]
  # (The tiny arrays' own bytes take 0.9 us of their 0.2 ms.)
  assert [cost for _, cost in points] == pytest.approx([0.0002, 0.001, 0.003, 0.003], abs=1e-6)
  # 16 kB lies halfway between 4 kB and 64 kB in log size; outside the
  # probed sizes, the nearest one's cost.
  assert from_probe.array_cost_s(points, 16384) == pytest.approx(0.002)
  assert from_probe.array_cost_s(points, 100) == points[0][1]
  assert from_probe.array_cost_s(points, 4 << 20) == pytest.approx(0.003)
  # 10 tiny arrays, 4 of 16 kB and 2 of 1 MiB, each at its size's cost.
  parts = from_probe.step_parts(probe, 8)
  assert parts['arrays_s'] == pytest.approx(10 * 0.0002 + 4 * 0.002 + 2 * 0.003, rel=1e-3)
  assert from_probe.step_parts(probe, 8, num_devices=8)['arrays_s'] == pytest.approx(
      (10 * 0.0002 + 4 * 0.002 + 2 * 0.003) * 7 / 3, rel=1e-3)
  # A probe without the sizes' fits (an older one): every array at per_operand_s.
  del probe['step_fixed_cost']['by_array_bytes']
  assert from_probe.step_parts(probe, 8)['arrays_s'] == pytest.approx(16 * 0.0002)


@pytest.mark.parametrize('wrong,part', [
    (dict(compute_s=0.200), 'compute_s'), (dict(busbw_gbps=GBPS / 2), 'bandwidth_s'),
    (dict(per_operand_s=0.004), 'arrays_s'), (dict(fixed_s=0.020), 'fixed_s')])
def test_a_probe_wrong_by_2x_makes_the_prediction_wrong_by_that_part(wrong, part):
  """The prediction is the probe's figures and nothing else: doubling one
  of them moves the step by exactly that part's own time."""
  right = from_probe.step_parts(_probe(), 8)
  off = from_probe.step_parts(_probe(**wrong), 8)
  assert off[part] == pytest.approx(2 * right[part])
  assert off['step_s'] - right['step_s'] == pytest.approx(right[part], rel=0.2)
  measured = right['step_s']  # a run that matches the right probe exactly
  assert abs(off['step_s'] / measured - 1) > 0.02


def test_a_probe_that_cannot_plan_is_refused_in_one_line(tmp_path):
  with pytest.raises(UsageError, match='no probe.json there'):
    from_probe.load(str(tmp_path))
  (tmp_path / 'probe.json').write_text('{"schema_version": 0}')
  with pytest.raises(UsageError, match='not a probe of schema 2'):
    from_probe.load(str(tmp_path))
  one_device = _probe(devices=1)
  one_device['collectives']['all_devices'] = {'measured': False, 'reason': 'one device'}
  # One device a host: all_devices is inter_host's set, and that fit is used.
  per_host = copy.deepcopy(_probe())
  per_host['collectives']['inter_host'] = per_host['collectives']['all_devices']
  per_host['collectives']['all_devices'] = {'measured': False, 'reason': 'same devices'}
  assert from_probe.step_parts(per_host, 8) == from_probe.step_parts(_probe(), 8)
  with pytest.raises(UsageError, match='no all-reduce across devices'):
    from_probe.step_parts(one_device, 8)
  with pytest.raises(UsageError, match=r'timed per-device batches \[8, 16\], not 32'):
    from_probe.step_parts(_probe(), 32)


def test_plan_mode_reads_a_probe_and_says_where_each_figure_came_from(tmp_path):
  probe_dir = tmp_path / 'probe'
  probe_dir.mkdir()
  (probe_dir / 'probe.json').write_text(json.dumps(_probe()))
  flags = ['--config=configs/quickstart.py', '--config.model.width=4',
           '--config.data.image_size=16', f'--config.plan.probe={probe_dir}']
  result = run_main(f'--workdir={tmp_path / "plan"}', '--mode=plan', *flags,
                    '--config.plan.num_workers=8')
  assert result.returncode == 0, result.stderr[-3000:]
  plan = json.loads((tmp_path / 'plan' / 'plan.json').read_text())
  assert plan['source'] == 'probe' and plan['cluster']['num_workers'] == 8
  assert set(plan['inputs_from']) >= {'compute_s', 'per_array', 'bandwidth', 'fixed_s'}
  row = next(r for r in plan['predicted']
             if r['num_devices'] == 4 and r['per_device_batch'] == 8)
  assert row['step_s'] == pytest.approx(from_probe.step_parts(_probe(), 8)['step_s'])
  assert 'nothing measured here' in result.stdout
  # Another model than the probe's is refused before anything runs.
  other = copy.deepcopy(_probe())
  other['model']['width'] = 8
  (probe_dir / 'probe.json').write_text(json.dumps(other))
  result = run_main(f'--workdir={tmp_path / "plan2"}', '--mode=plan', *flags)
  assert result.returncode == 2 and 'the probe timed' in result.stderr.splitlines()[-1]
