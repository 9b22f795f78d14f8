"""--mode=probe: collectives, a step's fixed cost, compute and input, measured.

The fit and the host grouping are pure and checked against known answers.
Two probes run as a user runs them: one process with 4 emulated devices on
real (JPEG folder) data, whose probe.json must hold every field of the
schema; and two processes through launch.py on 127.0.0.1, which must time
the collectives across the processes from both and write one probe.json.
"""

import json
import math
import os
import types

import jax
import numpy as np
import pytest

from configs import default
from core.errors import UsageError
from planner import mesh_from_probe
from probe import fit as fit_lib
from probe import mesh_collectives
from probe import run as probe_run
from probe import step_cost
from trainer import hlo_collectives
from probe import hosts
from probe import settings
from tests.helpers import run_main, xla_flags
from tests.test_bench import _jpeg_folder
from tests.test_launcher import launch

# A tiny model that compiles in seconds, few sizes and repeats: the figures
# are only checked for their shape and their arithmetic.
_TINY = ('--config.model.name=vit_ti16', '--config.model.width=16', '--config.model.depth=1',
         '--config.data.image_size=32', '--config.batch_size=8',
         '--config.plan.per_worker_batch_sizes=1,2', '--config.probe.num_sizes=3',
         '--config.probe.repeats=2', '--config.probe.ops_per_call=2',
         '--config.probe.step_repeats=3', '--config.probe.input_batches=2')
_SYNTHETIC = ('--config.data.source=synthetic', '--config.model.num_classes=10')


# --- The fit (pure) -------------------------------------------------------------

def test_fit_recovers_known_latency_and_bandwidth():
  sizes = np.geomspace(4096, 100e6, 7)
  latency, rate = 30e-6, 12.5e9  # 30 us, 100 Gbit/s
  exact = latency + sizes / rate
  fitted = fit_lib.fit_latency_bandwidth(sizes, exact)
  assert fitted.latency_s == pytest.approx(latency, rel=1e-6)
  assert fitted.bytes_per_s == pytest.approx(rate, rel=1e-6)
  assert fitted.max_relative_residual < 1e-9
  # Noise of a few percent on every point: relative residuals keep the
  # microseconds of the small messages in the fit, so the latency survives.
  noisy = exact * (1 + 0.03 * np.array([1, -1, 1, -1, 1, -1, 1]))
  fitted = fit_lib.fit_latency_bandwidth(sizes, noisy)
  assert fitted.latency_s == pytest.approx(latency, rel=0.1)
  assert fitted.bytes_per_s == pytest.approx(rate, rel=0.1)
  assert 0.02 < fitted.max_relative_residual < 0.1


def test_fit_keeps_latency_and_inverse_bandwidth_non_negative():
  sizes = [1e3, 1e4, 1e5]
  # Time that falls with size (noise): latency only, the bandwidth unbounded.
  flat = fit_lib.fit_latency_bandwidth(sizes, [2.1e-3, 2e-3, 1.9e-3])
  assert math.isinf(flat.bytes_per_s) and flat.latency_s == pytest.approx(2e-3, rel=0.06)
  # A line through a negative intercept: the latency is 0, not below.
  steep = fit_lib.fit_latency_bandwidth([1e4, 1e5, 1e6], [9.5e-6, 99.5e-6, 999.5e-6])
  assert steep.latency_s == 0 and 0.9e9 < steep.bytes_per_s < 1.1e9
  with pytest.raises(ValueError):
    fit_lib.fit_latency_bandwidth([1e3, 1e3], [1e-3, 2e-3])  # one size


def test_a_steps_fixed_cost_and_per_array_cost_are_fitted_over_its_array_counts(monkeypatch):
  """extra = fixed + arrays * per_array, from two processes' tiny steps (the
  slowest process's times), hand-computed: fixed 3 ms, 0.5 ms an array."""
  monkeypatch.setattr(probe_run.jax, 'devices', lambda: [None] * 4)
  def steps(per_array, slower, counts=step_cost.OPERAND_COUNTS):
    return [{'all_devices_step_s': 0.001 + 0.003 + per_array * k + slower,
             'one_device_step_s': 0.001} for k in counts]
  def process(slower):
    # The equal arrays' steps (the same fixed cost): 1 ms an array at the
    # first size, 3 ms at the others.
    return {'step': {'tiny': steps(0.0005, slower),
                     'equal': [steps(0.001 if i == 0 else 0.003, slower,
                                     (step_cost.EQUAL_ARRAYS,))
                               for i in range(len(step_cost.ARRAY_BYTES))]}}
  record = probe_run._step_record([process(0.0), process(0.0)])
  by_size = record['by_array_bytes']
  assert [e['array_bytes'] for e in by_size] == list(step_cost.ARRAY_BYTES)
  # Each equal-array step less the tiny model's fixed cost, over its arrays.
  assert [e['per_operand_s'] for e in by_size] == pytest.approx(
      [0.001] + [0.003] * (len(step_cost.ARRAY_BYTES) - 1))
  assert by_size[1]['point']['gradient_bytes'] == (
      step_cost.EQUAL_ARRAYS * step_cost.ARRAY_BYTES[1])
  assert record['mean_array_bytes'] == pytest.approx(
      step_cost.gradient_bytes(32) / 32)
  assert record['fixed_cost_s'] == pytest.approx(0.003)
  assert record['per_operand_s'] == pytest.approx(0.0005)
  assert record['max_relative_residual'] < 1e-9
  assert [q['extra_s'] for q in record['points']] == pytest.approx(
      [0.003 + 0.0005 * k for k in step_cost.OPERAND_COUNTS])
  # The slowest process sets each step; one device in all has nothing to fit.
  slow = probe_run._step_record([process(0.0), process(0.002)])
  assert slow['fixed_cost_s'] == pytest.approx(0.005)
  monkeypatch.setattr(probe_run.jax, 'devices', lambda: [None])
  alone = probe_run._step_record([process(0.0)])
  assert (alone['fixed_cost_s'], alone['per_operand_s'], alone['max_relative_residual']) == (
      0.0, 0.0, None)


def test_each_tiny_step_all_reduces_its_counted_arrays():
  """The fit's x is right: XLA moves each tiny step's gradients in
  all-reduces of exactly OPERAND_COUNTS arrays, read from the compiled step."""
  for k in step_cost.OPERAND_COUNTS:
    tiny = step_cost.TinyStep(jax.devices()[:2], k)
    text = tiny.compiled_text()
    found = [c for c in hlo_collectives.collectives_in(text) if c['op'] == 'all-reduce']
    assert sum(c['operands'] for c in found) == k, found
    assert sum(c['bytes'] for c in found) == step_cost.gradient_bytes(k)


def test_each_equal_array_step_all_reduces_its_arrays_of_one_size():
  for size in step_cost.ARRAY_BYTES:
    for k in (2, 8):
      text = step_cost.EqualArraysStep(jax.devices()[:2], k, size).compiled_text()
      found = [c for c in hlo_collectives.collectives_in(text) if c['op'] == 'all-reduce']
      assert sorted(b for c in found for b in c['array_bytes']) == [size] * k, found


def test_bus_factors_follow_nccl():
  assert fit_lib.bus_factor('all_reduce', 8) == 2 * 7 / 8
  assert fit_lib.bus_factor('all_gather', 8) == 7 / 8
  assert fit_lib.bus_factor('all_reduce', 2) == 1.0


def test_message_sizes_are_log_spaced_and_split_evenly():
  sizes = settings.message_sizes(4096, 10**7, 5, multiple=6)
  assert len(sizes) == 5 and sizes == sorted(sizes)
  assert all(s % (4 * 6) == 0 for s in sizes)
  assert sizes[0] >= 4096 and sizes[-1] >= 10**7 and sizes[-1] < 10**7 + 24
  ratios = np.diff(np.log(sizes))
  assert np.allclose(ratios, ratios[0], rtol=0.01)
  with pytest.raises(UsageError, match='probe.min_message_bytes'):
    settings.message_sizes(4096, 4000, 6, multiple=8)


def test_bad_probe_keys_are_refused():
  for key, value, words in (('host_grouping', 'nodes', 'probe.host_grouping'),
                            ('num_sizes', 1, 'probe.num_sizes'),
                            ('max_message_bytes', 100, 'probe.max_message_bytes'),
                            ('repeats', 0, 'probe.repeats')):
    config = default.get_config()
    config.probe[key] = value
    with pytest.raises(UsageError, match=words):
      settings.check_config(config)
  settings.check_config(default.get_config())


def test_bad_probe_key_exits_2_and_writes_nothing(tmp_path):
  workdir = tmp_path / 'never'
  result = run_main(f'--workdir={workdir}', '--mode=probe', '--config.probe.host_grouping=nodes')
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines()[-1].startswith('error: probe.host_grouping=')
  assert not workdir.exists()


# --- Hosts (pure) ---------------------------------------------------------------

def _devices(per_process):
  return [types.SimpleNamespace(id=100 * p + i, process_index=p)
          for p, count in enumerate(per_process) for i in range(count)]


def test_hosts_by_process_or_by_host_name():
  names = ['node-a', 'node-a', 'node-b', 'node-b']
  assert hosts.group_processes(names, 'hostname') == [[0, 1], [2, 3]]
  assert hosts.group_processes(names, 'process') == [[0], [1], [2], [3]]
  assert hosts.resolve_grouping('auto', 'cpu') == 'process'  # gloo, even on one machine
  assert hosts.resolve_grouping('auto', 'gpu') == 'hostname'
  assert hosts.resolve_grouping('process', 'gpu') == 'process'
  # Two nodes, each of two processes of 2 GPUs: hosts of 4 devices.
  topology = hosts.topology(_devices([2, 2, 2, 2]), names, 'hostname')
  assert [len(h) for h in topology.hosts] == [4, 4]
  assert topology.participants('intra_host') == 4
  assert topology.participants('inter_host') == 2
  assert topology.participants('all_devices') == 8
  intra = topology.level_devices('intra_host', 3)  # process 3 lives on node-b
  assert sorted(d.process_index for d in intra) == [2, 2, 3, 3]
  inter = topology.level_devices('inter_host', 0)
  assert [(d.process_index, d.id) for d in inter] == [(0, 0), (2, 200)]
  assert topology.level_devices('inter_host', 1) is None  # none of its devices takes part
  assert all(topology.skipped(level) is None for level in hosts.LEVELS)


def test_levels_that_a_job_cannot_measure_say_why():
  one_host = hosts.topology(_devices([4]), ['a'], 'process')
  assert one_host.skipped('intra_host') is None
  assert 'one host' in one_host.skipped('inter_host')
  assert 'one host' in one_host.skipped('all_devices')
  one_device_each = hosts.topology(_devices([1, 1]), ['a', 'b'], 'hostname')
  assert 'one device' in one_device_each.skipped('intra_host')
  assert one_device_each.skipped('inter_host') is None
  assert 'inter_host' in one_device_each.skipped('all_devices')


# --- Probes, run as a user runs them ---------------------------------------------

def _check_op(entry, op, participants, sizes):
  result = entry[op]
  assert [p['message_bytes'] for p in result['points']] == sizes
  for point in result['points']:
    assert point['time_s'] > 0
    assert point['time_s'] == max(t for t in point['time_s_by_process'] if t is not None)
    assert point['algbw_gbps'] == pytest.approx(point['message_bytes'] * 8 / point['time_s'] / 1e9)
    assert point['busbw_gbps'] == pytest.approx(point['algbw_gbps'] * result['bus_factor'])
  assert result['bus_factor'] == fit_lib.bus_factor(op, participants)
  assert result['latency_s'] >= 0 and result['max_relative_residual'] >= 0
  if result['algbw_bytes_per_s'] is not None:
    assert result['algbw_gbps'] == pytest.approx(result['algbw_bytes_per_s'] * 8 / 1e9)
    assert result['busbw_gbps'] == pytest.approx(result['algbw_gbps'] * result['bus_factor'])


@pytest.fixture(scope='module')
def one_process_probe(tmp_path_factory):
  root = tmp_path_factory.mktemp('probe')
  _jpeg_folder(root / 'images')
  workdir = root / 'one'
  result = run_main(f'--workdir={workdir}', '--mode=probe', *_TINY,
                    '--config.data.source=folder', f'--config.data.dir={root / "images"}',
                    '--config.plan.link_bandwidth_gbps=25', '--config.plan.intra_host_gbps=400',
                    env={'XLA_FLAGS': xla_flags(4)})
  assert result.returncode == 0, result.stderr[-3000:]
  with open(workdir / 'probe.json') as f:
    return json.load(f), result, workdir


def test_one_process_probe_writes_every_field(one_process_probe):
  record, result, workdir = one_process_probe
  assert sorted(os.listdir(workdir)) == ['probe.json']  # the lock is gone
  assert record['schema_version'] == 2
  p = record['provenance']
  assert (p['process_count'], p['device_count'], p['devices_per_process']) == (1, 4, [4])
  assert p['platform'] == 'cpu' and len(p['host_names']) == 1
  assert p['date'].endswith('Z') and p['commit'] and p['command'][0] == 'main.py'
  model = record['model']
  assert (model['name'], model['num_classes'], model['dtype']) == ('vit_ti16', 2, 'float32')
  assert model['parameter_bytes'] > 10_000
  assert record['hosts'] == {'grouping': 'process', 'why': record['hosts']['why'],
                             'processes_by_host': [[0]], 'devices_per_host': [4]}
  sizes = record['settings']['message_bytes']
  assert len(sizes) == 3 and sizes[0] >= 4096
  assert model['parameter_bytes'] <= sizes[-1] < model['parameter_bytes'] + 16
  assert record['configured'] == {'link_bandwidth_gbps': 25.0, 'intra_host_gbps': 400.0}
  intra = record['collectives']['intra_host']
  assert intra['measured'] and intra['participants'] == 4 and intra['configured_gbps'] == 400
  for op in fit_lib.OPS:
    _check_op(intra, op, 4, sizes)
  for level in ('inter_host', 'all_devices'):
    assert record['collectives'][level] == {
        'measured': False, 'reason': record['collectives'][level]['reason']}
    assert 'one host' in record['collectives'][level]['reason']
  step = record['step_fixed_cost']
  assert step['participants'] == 4
  assert [q['operands'] for q in step['points']] == list(step_cost.OPERAND_COUNTS)
  for q in step['points']:
    assert q['gradient_bytes'] > 0 and q['one_device_step_s'] > 0
    assert q['extra_s'] == pytest.approx(q['all_devices_step_s'] - q['one_device_step_s'])
  assert step['fixed_cost_s'] >= 0 and step['per_operand_s'] >= 0
  assert step['max_relative_residual'] is not None
  assert [e['array_bytes'] for e in step['by_array_bytes']] == list(step_cost.ARRAY_BYTES)
  for entry in step['by_array_bytes']:
    assert entry['per_operand_s'] >= 0
    assert entry['point']['operands'] == step_cost.EQUAL_ARRAYS
  compute = record['compute']
  assert [q['per_device_batch'] for q in compute['points']] == [1, 2]
  assert compute['largest_fitting_batch'] == 2 and compute['stopped_by_memory'] is False
  assert compute['devices_per_process'] == 4 and compute['capacity_bytes'] is None
  for q in compute['points']:
    assert q['compute_s'] > 0 and q['peak_bytes'] > 0
    assert q['tree_compute_s'] > 0
    assert q['tree_compute_s'] == max(q['tree_compute_s_by_process'])
    assert q['images_per_sec_per_device'] == pytest.approx(q['per_device_batch'] / q['compute_s'])
  # Twice the batch, about twice the forward and backward FLOPs.
  flops = [q['flops'] for q in compute['points']]
  assert flops[1] == pytest.approx(2 * flops[0], rel=0.05)
  # A mesh plan costs its candidates from this record (planner/mesh_from_probe.py).
  costing = mesh_from_probe.from_probe_record(record)
  assert costing.links.devices_per_host == 4 and costing.seconds_per_flop > 0
  assert record['update']['update_s'] > 0
  assert record['update']['update_s'] == max(record['update']['update_s_by_process'])
  program = record['step_program']
  # vit_ti16 has no batch norm: the step's collectives are the gradients'
  # all-reduce (XLA may split it) and the metrics'; over 4 devices, at least
  # the parameters' bytes.
  assert program['per_device_batch'] == 1 and program['count'] >= 1
  assert program['by_op']['all-reduce']['bytes'] >= model['parameter_bytes']
  assert program['bytes'] == sum(o['bytes'] for o in program['by_op'].values())
  assert program['operands'] >= program['count']
  # Every array of the step's collectives, by size.
  assert sum(n for _, n in program['arrays_by_bytes']) == program['operands']
  assert sum(b * n for b, n in program['arrays_by_bytes']) == program['bytes']
  feed = record['host_input']
  assert feed['measured'] and feed['data_source'] == 'folder'
  assert feed['images_per_sec'] > 0 and feed['cpu_ms_per_image'] > 0 and feed['host_cores'] >= 1
  assert feed['devices_images_per_sec'] == pytest.approx(
      4 * max(q['images_per_sec_per_device'] for q in compute['points']))
  assert isinstance(feed['input_bound'], bool) and 'images/s' in feed['verdict']
  assert record['elapsed_s'] > 0
  # The summary in words, once.
  assert result.stdout.count('probe: wrote') == 1
  assert 'inside a host (4 devices)' in result.stdout
  assert 'across hosts, one device each: not measured' in result.stdout


def test_two_processes_through_launch_py_time_the_collectives_between_them(tmp_path):
  """Also: synthetic data has no input to time; a probe replaces the
  probe.json of an earlier one."""
  workdir = tmp_path / 'two'
  workdir.mkdir()
  (workdir / 'probe.json').write_text('{"schema_version": 0}\n')
  result = launch(f'--workdir={workdir}', '--mode=probe', *_TINY, *_SYNTHETIC,
                  '--config.plan.per_worker_batch_sizes=1',
                  '--config.probe.max_message_bytes=16384', devices=2)
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(os.listdir(workdir)) == ['probe.json']
  record = json.loads((workdir / 'probe.json').read_text())
  assert record['schema_version'] == 2
  assert record['host_input'] == {'measured': False, 'reason': record['host_input']['reason']}
  assert 'synthetic' in record['host_input']['reason']
  p = record['provenance']
  assert (p['process_count'], p['device_count'], p['devices_per_process']) == (2, 4, [2, 2])
  assert len(p['host_names']) == 2
  # On CPU each process is a host: they talk over gloo's sockets.
  assert record['hosts']['grouping'] == 'process'
  assert record['hosts']['processes_by_host'] == [[0], [1]]
  sizes = record['settings']['message_bytes']
  assert sizes[-1] == 16384  # probe.max_message_bytes
  collectives = record['collectives']
  for level, participants in (('intra_host', 2), ('inter_host', 2), ('all_devices', 4)):
    entry = collectives[level]
    assert entry['measured'] and entry['participants'] == participants, level
    for op in fit_lib.OPS:
      _check_op(entry, op, participants, sizes)
      for point in entry[op]['points']:
        # Both processes took part and timed it.
        assert all(t is not None and t > 0 for t in point['time_s_by_process'])
        assert len(point['time_s_by_process']) == 2
  assert collectives['inter_host']['configured_gbps'] == 10.0  # plan.link_bandwidth_gbps
  step = record['step_fixed_cost']
  assert step['participants'] == 4
  assert all(len(q['all_devices_step_s_by_process']) == 2 for q in step['points'])
  assert len(record['compute']['points'][0]['compute_s_by_process']) == 2
  assert len(record['compute']['points'][0]['tree_compute_s_by_process']) == 2
  # Each collective on a mesh's groups: pairs inside a process and across
  # the two, all four across; both processes timed every point.
  timed = record['mesh_collectives']
  assert set(timed['fits']) == {f'{op} {level} {n}' for op in mesh_collectives.OPS
                                for n, level in ((2, 'inside a host'), (2, 'across hosts'),
                                                 (4, 'across hosts'))}
  assert all(len(q['time_s_by_process']) == 2 and q['time_s'] > 0 for q in timed['points'])
  # Process 0 alone writes and speaks.
  assert result.stdout.count('probe: wrote') == 1
  assert '[p0] probe: wrote' in result.stdout
  assert 'across hosts, one device each (2 devices)' in result.stdout


def test_the_step_programs_collectives_are_read_from_hlo_text():
  text = """
  %all-reduce.1 = f32[64]{0} all-reduce(f32[64]{0} %x), replica_groups={{0,1}}
  %ar = (f32[3,3,16,16]{3,2,1,0}, bf16[16]{0}) all-reduce(%a, %b), to_apply=%sum
  %ag = (f32[8]{0}, f32[32]{0}) all-gather-start(f32[8]{0} %y), dimensions={0}
  %agd = f32[32]{0} all-gather-done(%ag)
  %add = f32[64]{0} add(%p, %q)
  %rs = f32[16]{0} reduce-scatter(f32[64]{0} %z), dimensions={0}
  """
  assert hlo_collectives.collectives_in(text) == [
      {'op': 'all-reduce', 'operands': 1, 'bytes': 256, 'array_bytes': [256],
       'groups': [[0, 1]], 'runs': 1},
      {'op': 'all-reduce', 'operands': 2, 'bytes': 3 * 3 * 16 * 16 * 4 + 16 * 2,
       'array_bytes': [3 * 3 * 16 * 16 * 4, 16 * 2], 'groups': None, 'runs': 1},
      {'op': 'all-gather', 'operands': 1, 'bytes': 128, 'array_bytes': [128],
       'groups': None, 'runs': 1},
      {'op': 'reduce-scatter', 'operands': 1, 'bytes': 64, 'array_bytes': [64],
       'groups': None, 'runs': 1},
  ]

