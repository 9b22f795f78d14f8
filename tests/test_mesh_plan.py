"""plan.parallelism=mesh (planner/mesh_plan.py, mesh_cost.py,
mesh_candidates.py): the collectives' groups read from HLO, each
collective's cost computed by hand, the candidates, the depth derivation
held against full compiles, and the mode as a user runs it."""

import json
import math
import re

import jax
import numpy as np
import pytest

from configs import default
from core.errors import UsageError
from planner import mesh_candidates as mc
from planner import mesh_cost
from planner import mesh_from_probe
from planner import mesh_plan
from trainer import hlo_collectives
from trainer import mesh as trainer_mesh
from tests.helpers import run_main
from tests.helpers import xla_flags


@pytest.mark.parametrize('line, dims, perm, size', [
    ('replica_groups=[4,2]<=[4,2]T(1,0), use_global', (4, 2), (1, 0), 2),
    ('replica_groups=[4,2]<=[2,2,2]T(2,1,0), use', (2, 2, 2), (2, 1, 0), 2),
    ('replica_groups=[2,4]<=[8], dimensions', (8,), (0,), 4),
])
def test_iota_groups_are_numpys_transposed_arange(line, dims, perm, size):
  want = np.arange(math.prod(dims)).reshape(dims).transpose(perm).reshape(-1, size)
  assert hlo_collectives.replica_groups(line) == want.tolist()


def test_explicit_groups_and_permute_pairs_are_read_as_written():
  assert hlo_collectives.replica_groups('x, replica_groups={{0,2},{1,3}}, y') == [[0, 2], [1, 3]]
  assert hlo_collectives.replica_groups('source_target_pairs={{0,1},{1,0}}') == [[0, 1], [1, 0]]
  assert hlo_collectives.replica_groups('replica_groups={}, to_apply') is None


@pytest.mark.parametrize('line, want', [
    # ids arange(8).reshape(4,2).T, laid out 2 x 4; groups along the first axis
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}, dims",
     [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("replica_groups=mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_0'}, dims",
     [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, dims", [list(range(8))]),
    # id of (a, b, c) = 4c + 2b + a; groups along b
    ("replica_groups=mesh['axis_0'=1,'axis_1'=1,'axis_2'=2,'axis_3'=2,'axis_4'=2], "
     "device_ids=([2,2,2]T(2,1,0)) {'axis_3'}, x", [[0, 2], [4, 6], [1, 3], [5, 7]]),
    # a sub-axis: x = 4a + 2b + c, the factor b of 2 after a's 2
    ("replica_groups=mesh['x'=8] {'x':(2)2}, y", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("replica_groups=mesh['x'=2,'y'=4] {'x','y'}, y", [list(range(8))]),
    ("replica_groups=mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'y'}, y", [[0, 2], [1, 3]]),
])
def test_mesh_form_groups_are_the_devices_along_their_axes(line, want):
  assert hlo_collectives.replica_groups(line) == want


def test_costed_sums_collectives_by_level_and_by_group_size():
  # Hosts of 4: a pair inside a host, a pair across hosts (twice, once in a
  # loop of 3), all 8; each costed on _LINKS by hand below.
  compiled = {**{k: 1.0 for k in mesh_plan._SUMMED}, 'collectives': [
      {'op': 'all-reduce', 'bytes': 1e6, 'operands': 2, 'group': [0, 1], 'runs': 1},
      {'op': 'all-reduce', 'bytes': 1e6, 'operands': 1, 'group': [0, 4], 'runs': 3},
      {'op': 'all-reduce', 'bytes': 1e6, 'operands': 1, 'group': list(range(8)), 'runs': 1}]}
  terms = mesh_plan.costed(compiled, _LINKS)
  pair_inside = 2 * 1e-6 + 1e6 / 100e9            # 2 steps; sends 2 x 1/2 MB at 100 GB/s
  pair_across = 2 * 10e-6 + 4 * 1e6 / 10e9        # 4 rings leave a host: 4 x 1 MB at 10 GB/s
  all_eight = 14 * 10e-6 + 1.75e6 / 10e9          # 1 ring, 2 x 7/8 MB
  by_group = terms['collectives_by_group']
  assert by_group['all-reduce inside a host, groups of 2']['seconds'] == pytest.approx(pair_inside)
  assert by_group['all-reduce across hosts, groups of 2']['seconds'] == pytest.approx(3 * pair_across)
  assert by_group['all-reduce across hosts, groups of 2']['count'] == 3
  assert by_group['all-reduce across hosts, groups of 8']['seconds'] == pytest.approx(all_eight)
  across = terms['collectives']['all-reduce across hosts']
  assert across['seconds'] == pytest.approx(3 * pair_across + all_eight)
  assert across['count'] == 4 and across['operands'] == 4


def _axis_groups(mesh, axis: str) -> list[set]:
  """The device-id groups along one axis of a jax mesh (numpy's layout of
  jax's own device array, not the HLO reader's)."""
  ids = np.vectorize(lambda d: d.id)(mesh.devices)
  i = mesh.axis_names.index(axis)
  return [set(g) for g in np.moveaxis(ids, i, -1).reshape(-1, ids.shape[i]).tolist()]


def test_a_compiled_steps_groups_are_its_meshs_axes():
  # FSDP shards the parameters over fsdp alone, so their gathers span the
  # fsdp pairs; under data=2 x tensor=4 the gradients, replicated over
  # data, are reduced over the data pairs. Read as one group of every
  # device, both would be costed as crossing every host.
  config = _tiny_vit(1)  # the default rules: FSDP_TENSOR
  for candidate, axis, pick in (
      (mc.Candidate(4, 2, 1), 'fsdp', lambda ops: [o for o in ops if o['op'] == 'all-gather']),
      (mc.Candidate(2, 1, 4), 'data',
       lambda ops: [max((o for o in ops if o['op'] == 'all-reduce'), key=lambda o: o['bytes'])])):
    config.update_from_flattened_dict(candidate.config_values())
    mesh = trainer_mesh.create_mesh(config.mesh)
    raw = mesh_plan.compile_candidate(config, candidate, 10, dtype='float32')
    picked = pick(raw['collectives'])
    along = [o for o in picked if set(o['group']) in _axis_groups(mesh, axis)]
    assert len(along) > len(picked) / 2, (candidate.name(), [o['group'] for o in picked])


_LINKS = mesh_cost.Links(devices_per_host=4, intra_bytes_per_s=100e9, intra_latency_s=1e-6,
                         nic_bytes_per_s=10e9, nic_latency_s=10e-6)


def test_an_all_reduce_inside_a_host_is_its_rings_steps_and_bytes():
  # 4 devices, 1 MB: 2 x 3 steps of 1 us, each device sends 2 x 3/4 MB at 100 GB/s.
  got = mesh_cost.collective_s('all-reduce', 1e6, [[0, 1, 2, 3], [4, 5, 6, 7]], _LINKS)
  assert got['level'] == 'inside a host' and got['group_size'] == 4
  assert got['seconds'] == pytest.approx(6e-6 + 1.5e6 / 100e9)


def test_groups_across_hosts_share_the_nic_by_how_many_rings_leave_a_host():
  # A data axis of 2 across 2 hosts: 4 rings (one per device of a host) each
  # send 1/2 of 1 MB through the NIC: 4 x 0.5 MB at 10 GB/s, 1 step of 10 us.
  pairs = [[0, 4], [1, 5], [2, 6], [3, 7]]
  got = mesh_cost.collective_s('all-gather', 1e6, pairs, _LINKS)
  assert got['level'] == 'across hosts'
  assert got['seconds'] == pytest.approx(10e-6 + 4 * 0.5e6 / 10e9)
  # All 8 in one ring: one ring leaves each host; 14 steps; 2 x 7/8 MB.
  whole = mesh_cost.collective_s('all-reduce', 1e6, [list(range(8))], _LINKS)
  assert whole['seconds'] == pytest.approx(14 * 10e-6 + 1.75e6 / 10e9)
  # A reduce-scatter's result is 1/n of its input: each device sends (n-1) results.
  scatter = mesh_cost.collective_s('reduce-scatter', 1e3, [[0, 1, 2, 3]], _LINKS)
  assert scatter['seconds'] == pytest.approx(3e-6 + 3e3 / 100e9)
  assert mesh_cost.collective_s('all-reduce', 1e6, [[5]], _LINKS)['seconds'] == 0.0


def test_overlap_hides_communication_behind_the_backward_share():
  assert mesh_cost.step_s(3.0, 1.0, overlap=False, backprop_share=2 / 3) == 4.0
  assert mesh_cost.step_s(3.0, 1.0, overlap=True, backprop_share=2 / 3) == 3.0
  assert mesh_cost.step_s(3.0, 5.0, overlap=True, backprop_share=2 / 3) == 6.0


def test_the_meshes_are_every_factorisation_whose_tensor_divides_the_heads():
  # ViT-B: 12 heads, MLP 3072: tensor 1, 2 or 4 of 8 devices, never 8.
  got = mc.meshes(8, mc.tensor_divides([12, 3072]))
  assert sorted(got) == sorted([(8, 1, 1), (4, 2, 1), (2, 4, 1), (1, 8, 1), (4, 1, 2),
                                (2, 2, 2), (1, 4, 2), (2, 1, 4), (1, 2, 4)])
  starts = mc.first_rungs(8, 4, mc.tensor_divides([12, 3072]))
  assert all(4 % (c.data * c.fsdp) == 0 for c in starts)  # batch 4 splits evenly
  assert {c.shard_update for c in starts if c.data == 1} == {False}
  ladder = mc.rungs(mc.Candidate(1, 2, 4), global_batch=4)  # 2 images a device
  assert [(c.remat, c.grad_accum) for c in ladder] == [
      ('none', 1), ('dots', 1), ('full', 1), ('none', 2), ('dots', 2), ('full', 2)]


def _tiny_vit(depth):
  config = default.get_config()
  config.model.name, config.model.width, config.model.depth = 'vit_ti16', 128, depth
  config.data.image_size, config.batch_size = 32, 16
  config.data.num_synthetic_classes = 10
  config.plan.devices_per_host = 4
  return config


@pytest.mark.parametrize('candidate', [mc.Candidate(1, 4, 2),
                                       mc.Candidate(4, 1, 2, shard_update=True, remat='dots')])
def test_terms_derived_from_one_and_two_blocks_match_a_compile_of_four(candidate):
  links = mesh_from_probe.configured(_tiny_vit(4).plan).links
  full, small, larger = (
      mesh_plan.costed(mesh_plan.compile_candidate(_tiny_vit(d), candidate, 10,
                                                   dtype='bfloat16'), links)
      for d in (4, 1, 2))
  derived = mesh_plan.derive(small, larger, 1, 2, 4)
  for key in ('params', 'opt_state', 'flops'):
    assert derived[key] == pytest.approx(full[key], rel=1e-3), key
  assert derived['peak'] == pytest.approx(full['peak'], rel=0.05)
  assert derived['bytes_accessed'] == pytest.approx(full['bytes_accessed'], rel=0.05)
  seconds = lambda t: sum(c['seconds'] for c in t['collectives'].values())
  assert seconds(derived) == pytest.approx(seconds(full), rel=0.05)
  by_group = sum(c['seconds'] for c in derived['collectives_by_group'].values())
  assert by_group == pytest.approx(seconds(derived))


_PLAN = ['--mode=plan', '--config=configs/quickstart.py', '--config.model.name=vit_ti16',
         '--config.model.width=128', '--config.model.depth=1', '--config.data.image_size=32',
         '--config.batch_size=16', '--config.plan.parallelism=mesh',
         '--config.plan.device_tflops=100', '--config.plan.devices_per_host=2',
         '--config.plan.link_bandwidth_gbps=100', '--config.plan.intra_host_gbps=2400']


def _plan(workdir, devices, *extra):
  return run_main(f'--workdir={workdir}', *_PLAN, f'--config.plan.num_workers={devices}',
                  *extra, env={'XLA_FLAGS': xla_flags(devices)})


def test_nothing_fitting_is_one_line_with_the_memory_that_would(tmp_path):
  result = _plan(tmp_path, 1, '--config.plan.device_memory_gib=0.0001',
                 '--config.plan.devices_per_host=1')
  assert result.returncode == 2
  (line,) = result.stderr.strip().splitlines()[-1:]
  assert 'fits plan.device_memory_gib=0.0001' in line and 'GiB per device' in line
  with open(tmp_path / 'plan.json') as f:
    misses = json.load(f)['not_fitting']
  # Each mesh's miss is full remat over one micro-batch or the most, the
  # smaller (the summed gradient's buffer can outweigh what accumulation saves).
  for m in misses:
    per_device = 16 // (m['mesh.data'] * m['mesh.fsdp'])
    assert m['model.remat'] == 'full' and m['grad_accum_steps'] in (1, per_device)


@pytest.mark.parametrize('extra, message', [
    (['--config.plan.parallelism=zero'], 'plan.parallelism='),
    (['--config.plan.device_tflops=0', '--config.plan.compute_s=1'], 'plan.compute_s is for'),
    (['--config.plan.time_steps=-1'], 'plan.time_steps=-1 must be >= 0'),
    (['--config.plan.time_steps=2'], 'plan.time_steps=2 times the answered meshes on the '
                                     'devices at hand, which only a probe'),
    (['--config.plan.time_steps=2', '--config.plan.parallelism=data'],
     'plan.time_steps=2 times the answers of a mesh plan'),
])
def test_bad_mesh_plan_keys_are_one_line(tmp_path, extra, message):
  result = _plan(tmp_path / 'w', 2, *extra)
  assert result.returncode == 2, result.stderr[-2000:]
  assert message in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize('provenance, seen', [
    ({'device_count': 8, 'platform': 'cpu', 'process_count': 2}, '8 cpu device(s) in 2 process'),
    ({'device_count': 8, 'platform': 'gpu', 'process_count': 1}, '8 gpu device(s) in 1 process'),
    ({'device_count': 4, 'platform': 'cpu', 'process_count': 1}, '4 cpu device(s) in 1 process'),
])
def test_timing_steps_where_the_probe_did_not_run_is_one_line(provenance, seen):
  for processes in (1, 2):  # the probe's own devices, in one process or two
    same = {'device_count': 8, 'platform': 'cpu', 'process_count': processes}
    mesh_from_probe.check_timeable({'provenance': same}, 8, 'cpu', processes)
  with pytest.raises(UsageError, match=re.escape(f'the probe measured {seen}')) as error:
    mesh_from_probe.check_timeable({'provenance': provenance}, 8, 'cpu', 1)
  assert 'this job has 8 cpu device(s) in 1 process(es)' in str(error.value)
  assert '\n' not in str(error.value)


def test_a_device_count_other_than_the_clusters_is_one_line(tmp_path):
  result = run_main(f'--workdir={tmp_path}', *_PLAN, '--config.plan.num_workers=4')
  assert result.returncode == 2, result.stderr[-2000:]
  assert 'plan.num_workers=4' in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize('name, published', [
    ('vit_h14', 632e6),  # Dosovitskiy et al. 2021, Table 1: ViT-Huge, 632M
    ('vit_g14', 1011e6),  # Zhai et al. 2022, Table 2: ViT-g/14, 1011M
    ('vit_bigg14', 1843e6),  # Zhai et al. 2022, Table 2: ViT-G/14, 1843M
])
def test_the_large_vits_have_their_papers_parameter_counts(name, published):
  from models import create_model  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  model = create_model(name, num_classes=1000, image_size=224)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jax.numpy.zeros(
      (1, 224, 224, 3)), train=False))
  count = sum(p.size for p in jax.tree.leaves(nn.unbox(shapes['params'])))
  assert count == pytest.approx(published, rel=2e-3)  # a block is 1-3% of them


def test_a_probes_compute_is_its_seconds_a_flop_at_each_batch_interpolated_in_log_batch():
  points = [{'per_device_batch': 16, 'flops': 4e9, 'compute_s': 0.043},
            {'per_device_batch': 4, 'flops': 1e9, 'compute_s': 0.02},
            {'per_device_batch': 8, 'flops': 2e9, 'compute_s': 0.03}]
  rates = mesh_from_probe.compute_rates(points)
  assert [b for b, _ in rates] == [4, 8, 16]
  assert [r for _, r in rates] == pytest.approx([2e-11, 1.5e-11, 1.075e-11])
  costing = mesh_from_probe.Costing(links=None, seconds_per_flop=rates[-1][1], rates=rates,
                                    update_s=0.004)
  # 1e9 FLOPs at 8 a device (a probed batch), at 4 x sqrt(2) (halfway in
  # log batch between 4 and 8), below and above the probed batches.
  assert costing.compute_s(1e9, 0.0, 8) == pytest.approx(0.015)
  assert costing.compute_s(1e9, 0.0, 4 * 2 ** 0.5) == pytest.approx(0.0175)
  assert costing.compute_s(1e9, 0.5, 2) == pytest.approx(0.02 + 0.002)
  assert costing.compute_s(1e9, 0.0, 64) == pytest.approx(0.01075)
  # Only batches outside the probed 4..16 take a rate the probe did not time.
  assert [costing.beyond_probed(b) for b in (2, 4, 8, 16, 32)] == [True, False, False, False, True]
  rows = [{'name': 'data=8', 'micro_batch_per_device': 2},
          {'name': 'data=2 x tensor=4', 'micro_batch_per_device': 8},
          {'name': 'tensor=8', 'micro_batch_per_device': 16 * 2}]
  assert mesh_plan._beyond_probed(rows, costing) == (
      "beyond the probe's batches (4 to 16 images a device): data=8 at 2, tensor=8 at 32 "
      "images a device, costed at the rate of the nearest probed batch; probe with "
      'plan.per_worker_batch_sizes covering them for their own')
  assert mesh_plan._beyond_probed(rows[1:2], costing) == ''
  # Where the probe also timed the gradients as a tree (an SPMD step's
  # form), the rates are those times', not the wire program's.
  trees = [dict(q, tree_compute_s=q['compute_s'] / 2) for q in points]
  assert mesh_from_probe.compute_rates(trees)[0][1] == pytest.approx(1e-11)


def _probe(devices=4, per_host=2, flops=True):
  """A probe.json of a vit_ti16 of width 128 and 1 block at 32 px, its
  figures round numbers whose costs a test computes by hand."""
  ring = lambda p, latency, gbps: {'measured': True, 'participants': p, 'all_reduce': {
      'latency_s': latency, 'busbw_gbps': gbps}}
  points = [{'per_device_batch': 8, 'compute_s': 0.011, 'peak_bytes': 1},
            {'per_device_batch': 16, 'compute_s': 0.021, 'peak_bytes': 1}]
  if flops:
    points[0]['flops'], points[1]['flops'] = 1e9, 2e9
  return {
      'schema_version': 2,
      'provenance': {'device_count': devices, 'platform': 'cpu', 'process_count': 1},
      'model': {'name': 'vit_ti16', 'width': 128, 'depth': 1, 'image_size': 32,
                'dtype': 'float32', 'parameter_bytes': 1e6},
      'hosts': {'devices_per_host': [per_host] * (devices // per_host)},
      'collectives': {'intra_host': ring(per_host, 2e-4, 8.0),
                      'inter_host': ring(devices // per_host, 1e-3, 0.8)},
      'step_fixed_cost': {'participants': devices, 'fixed_cost_s': 5e-4,
                          'per_operand_s': 6e-4},
      'compute': {'points': points}, 'update': {'update_s': 0.004},
      'step_program': {'operands': 1}}


def test_a_probes_links_are_its_rings_bandwidth_and_latency_per_step():
  costing = mesh_from_probe.from_probe_record(_probe())
  links = costing.links
  assert links.devices_per_host == 2
  # intra_host: 2 devices, 8 Gbit/s bus bandwidth, 200 us over 2 x 1 ring steps.
  assert links.intra_bytes_per_s == pytest.approx(1e9) and links.intra_latency_s == 1e-4
  # inter_host: one device on each of 2 hosts, 0.8 Gbit/s, 1 ms over 2 steps.
  assert links.nic_bytes_per_s == pytest.approx(1e8) and links.nic_latency_s == 5e-4
  # The probe's step spanned hosts: its 0.6 ms an array over 2 x 3 ring steps
  # of 4 devices is paid across hosts only.
  assert (links.intra_array_s, links.nic_array_s) == (0.0, pytest.approx(1e-4))
  assert costing.fixed_s == 5e-4
  # Compute: 1.1e-11 s a FLOP at 8 images a device, 1.05e-11 at 16, and
  # half the update for half of it.
  assert costing.compute_s(3e9, 0.5, 8) == pytest.approx(0.033 + 0.002)
  assert costing.compute_s(3e9, 0.0, 16) == pytest.approx(0.0315)
  # The update's share: the optimiser state's a device holds (ZeRO-1 shards
  # it over replicated parameters); without state, the parameters'.
  assert costing.update_share(1e6, 2.5e5, 1e6) == 0.25
  assert costing.update_share(5e5, 0, 0) == 0.5
  # An all-gather of 2 arrays over 4 devices on 2 hosts: 3 steps, each its
  # latency and 2 arrays; 2 rings a host share the NIC, 3/4 of 1 MB each.
  got = mesh_cost.collective_s('all-gather', 1e6, [[0, 1, 2, 3]], links, operands=2)
  assert got['seconds'] == pytest.approx(3 * (5e-4 + 2 * 1e-4) + 1 * 0.75e6 / 1e8)


def test_a_probe_of_one_host_costs_the_nic_from_the_plan_keys():
  config = _tiny_vit(1)
  config.plan.link_bandwidth_gbps, config.plan.link_latency_ms = 80.0, 0.2
  probed = mesh_from_probe.from_probe_record(_probe(devices=2, per_host=2))
  costing = mesh_from_probe.across_hosts(probed, config.plan)
  # Inside the host and the compute: the probe's; the NIC: 80 Gbit/s, 0.2 ms.
  assert costing.links.intra_bytes_per_s == probed.links.intra_bytes_per_s
  assert costing.seconds_per_flop == probed.seconds_per_flop
  assert costing.links.nic_bytes_per_s == pytest.approx(1e10)
  assert costing.links.nic_latency_s == pytest.approx(2e-4)
  assert costing.links.nic_array_s == probed.links.intra_array_s
  # One ring of 4 over two hosts of 2, so one ring leaves each host: 3 steps
  # of 0.2 ms and the probe's per-array cost; each device sends 3/4 of 1 MB.
  got = mesh_cost.collective_s('all-gather', 1e6, [[0, 1, 2, 3]], costing.links)
  want = 3 * (2e-4 + costing.links.intra_array_s) + max(0.75e6 / 1e10,
                                                         0.75e6 / costing.links.intra_bytes_per_s)
  assert got['level'] == 'across hosts' and got['seconds'] == pytest.approx(want)


def _probe_config(tmp_path, probe, **plan):
  (tmp_path / 'probe.json').write_text(json.dumps(probe))
  config = _tiny_vit(1)
  config.plan.probe, config.plan.devices_per_host = str(tmp_path), 1
  config.plan.update(plan)
  return config


def test_a_probe_fits_its_cluster_or_a_multiple_of_its_one_host(tmp_path):
  one_host = _probe(devices=2, per_host=2)
  _, costing = mesh_from_probe.load(_probe_config(tmp_path, one_host), 2)
  assert costing.source == 'probe'
  _, costing = mesh_from_probe.load(_probe_config(tmp_path, one_host), 8)
  assert costing.source == 'probe of one host, NIC from plan.*'
  with pytest.raises(UsageError, match='a multiple of its devices'):
    mesh_from_probe.load(_probe_config(tmp_path, one_host), 3)
  with pytest.raises(UsageError, match='in hosts of 2 and this plan is for 8'):
    mesh_from_probe.load(_probe_config(tmp_path, _probe(devices=4, per_host=2)), 8)
  with pytest.raises(UsageError, match='plan.devices_per_host=4: the probed host holds 2'):
    mesh_from_probe.load(_probe_config(tmp_path, one_host, devices_per_host=4), 8)


def test_a_probe_without_flops_or_of_unequal_hosts_is_one_line():
  with pytest.raises(UsageError, match='no FLOPs'):
    mesh_from_probe.from_probe_record(_probe(flops=False))
  unequal = _probe()
  unequal['hosts']['devices_per_host'] = [3, 1]
  with pytest.raises(UsageError, match='hosts of equal size'):
    mesh_from_probe.from_probe_record(unequal)


def test_the_mesh_plan_names_the_fastest_fitting_mesh_costed_from_a_probe(tmp_path):
  (tmp_path / 'probe').mkdir()
  (tmp_path / 'probe' / 'probe.json').write_text(json.dumps(_probe(devices=2, per_host=2)))
  flags = [a for a in _PLAN if not a.startswith(('--config.plan.device_tflops',
                                                 '--config.plan.devices_per_host'))]
  result = run_main(f'--workdir={tmp_path / "plan"}', *flags, '--config.plan.device_memory_gib=1',
                    f'--config.plan.probe={tmp_path / "probe"}', env={'XLA_FLAGS': xla_flags(2)})
  assert result.returncode == 0, result.stderr[-3000:]
  with open(tmp_path / 'plan' / 'plan.json') as f:
    plan = json.load(f)
  rows = plan['fitting']
  assert [r['step_s'] for r in rows] == sorted(r['step_s'] for r in rows)
  # 2 heads: tensor 1 or 2; data x fsdp x tensor = 2; ZeRO-1 where data > 1.
  # The three fastest fit; the fourth is not climbed, slower at its first rung.
  assert len(rows) == 3 and len(plan['not_climbed']) == 1
  assert plan['not_climbed'][0]['step_s'] >= rows[-1]['step_s']
  assert sorted(r['name'] for r in rows + plan['not_climbed']) == sorted([
      'data=2', 'data=2 + ZeRO-1', 'fsdp=2', 'tensor=2'])
  assert plan['best'] == rows[0]['name'] and not plan['not_fitting']
  assert f'--config.mesh.data={rows[0]["mesh.data"]}' in plan['command']
  # The run's own overrides stay in the command; the plan's keys do not.
  assert '--config.model.width=128 --config.model.depth=1' in plan['command']
  assert '--config.batch_size=16' in plan['command'] and '--config.plan.' not in plan['command']
  assert 'fastest that fits: ' + rows[0]['name'] in result.stdout
  # Each runner-up says how far behind the fastest it is predicted.
  for row in rows[1:]:
    over = 100 * (row['step_s'] / rows[0]['step_s'] - 1)
    assert f'next: {row["name"]}, {row["step_s"] * 1e3:.4g} ms, +{over:.1f}% over the fastest' \
        in result.stdout
  assert plan['costed_from'] == 'probe' and plan['dtype'] == 'float32'
  for row in rows:
    assert row['step_s'] == pytest.approx(row['compute_s'] + row['communication_s'])
    # 16 images over the data x fsdp shards: 1.1e-11 s a FLOP at 8 a
    # device (data=2, fsdp=2), 1.05e-11 at 16 (tensor=2).
    flop_s = 1.05e-11 if row['mesh.data'] * row['mesh.fsdp'] == 1 else 1.1e-11
    want = row['flops'] * flop_s + 0.004 * row['opt_state'] / row['opt_state_full']
    assert row['compute_s'] == pytest.approx(want), row['name']
    collectives = sum(c['seconds'] for c in row['collectives'].values())
    assert row['communication_s'] == pytest.approx(collectives + 5e-4), row['name']
  # The whole model's optimiser state; ZeRO-1 and FSDP hold half of it on
  # each of the 2 devices, and compute half the update; the tensor axis
  # splits the matrices but not the norms and biases.
  full = {r['opt_state_full'] for r in rows + plan['not_climbed']}
  assert len(full) == 1
  share = {r['name']: r['opt_state'] / r['opt_state_full'] for r in rows + plan['not_climbed']}
  assert share['data=2'] == 1.0
  # (Arrays too small to split, kept whole, add a fraction of a percent.)
  assert share['data=2 + ZeRO-1'] == pytest.approx(0.5, abs=0.01)
  assert share['fsdp=2'] == pytest.approx(0.5, abs=0.01)
  assert 0.5 < share['tensor=2'] < 1.0
  assert 'timed' not in plan and 'timed, ' not in result.stdout
  # Planning again in the same work dir, for other memory, compiles nothing
  # for the plan; with plan.time_steps it then runs 2 real steps of each
  # answered mesh on these devices, the probed ones.
  again = run_main(f'--workdir={tmp_path / "plan"}', *flags, '--config.plan.device_memory_gib=2',
                   f'--config.plan.probe={tmp_path / "probe"}', '--config.plan.time_steps=2',
                   env={'XLA_FLAGS': xla_flags(2)})
  assert again.returncode == 0, again.stderr[-3000:]
  with open(tmp_path / 'plan' / 'plan.json') as f:
    replan = json.load(f)
  assert replan['compiles'] == {'compiled': 0, 'reused': plan['compiles']['compiled']}
  assert plan['compiles']['compiled'] > 0
  assert [(r['name'], r['step_s'], r['peak']) for r in replan['fitting']] == [
      (r['name'], r['step_s'], r['peak']) for r in rows]
  timed = replan['timed']
  assert list(timed) == [r['name'] for r in rows]
  for row in rows:
    figures = timed[row['name']]
    assert len(figures['steps_s']) == 2 and figures['step_s'] == np.median(figures['steps_s'])
    # The trainer's compile of the configuration: the peak the plan read.
    assert figures['peak_bytes'] == row['peak'], row['name']
  fastest = min(timed, key=lambda name: timed[name]['step_s'])
  assert replan['timed_best'] == fastest and replan['best'] == rows[0]['name']
  winner = next(r for r in rows if r['name'] == fastest)
  assert f'--config.mesh.fsdp={winner["mesh.fsdp"]} --config.mesh.tensor={winner["mesh.tensor"]}' \
      in replan['command']
  assert f'fastest when timed: {fastest}' in again.stdout
  assert f'{rows[1]["name"]} {timed[rows[1]["name"]]["step_s"] * 1e3:.4g} ms (predicted' \
      in again.stdout
  # The same probe of one host of 2, for two such hosts: the NIC from plan.*.
  two_hosts = run_main(f'--workdir={tmp_path / "plan4"}', *flags,
                       f'--config.plan.probe={tmp_path / "probe"}',
                       '--config.plan.num_workers=4', env={'XLA_FLAGS': xla_flags(4)})
  assert two_hosts.returncode == 0, two_hosts.stderr[-3000:]
  with open(tmp_path / 'plan4' / 'plan.json') as f:
    wider = json.load(f)
  assert wider['costed_from'] == 'probe of one host, NIC from plan.*'
  assert wider['cluster']['devices'] == 4
  # 16 images over 4 devices: 4 a device on data x fsdp = 4, below the
  # probe's 8 and 16; the answers name the answered rows costed so.
  for row in wider['fitting']:
    assert row['micro_batch_per_device'] == 16 / (row['mesh.data'] * row['mesh.fsdp'])
  beyond = [f'{r["name"]} at 4' for r in wider['fitting'][:3] if r['micro_batch_per_device'] == 4]
  said = [a for a in wider['answers'] if a.startswith("beyond the probe's batches (8 to 16 ")]
  assert beyond and len(said) == 1
  assert said[0].startswith(
      f"beyond the probe's batches (8 to 16 images a device): {', '.join(beyond)} images")
  assert any(key.endswith('across hosts') for row in wider['fitting']
             for key in row['collectives'])
  other = _probe(devices=2, per_host=2)
  other['model']['width'] = 192
  (tmp_path / 'probe' / 'probe.json').write_text(json.dumps(other))
  result = run_main(f'--workdir={tmp_path / "plan2"}', *flags,
                    f'--config.plan.probe={tmp_path / "probe"}', env={'XLA_FLAGS': xla_flags(2)})
  assert result.returncode == 2 and 'the probe timed' in result.stderr.strip().splitlines()[-1]


def test_a_compile_cache_line_cut_short_is_compiled_again(tmp_path):
  good = {'key': 'k1', 'terms': {'peak': 1}}
  (tmp_path / mesh_plan.COMPILES_FILE).write_text(json.dumps(good) + '\n{"key": "k2", "ter')
  cache = mesh_plan.CompileCache(str(tmp_path))
  assert cache.entries == {'k1': {'peak': 1}}
  config = _tiny_vit(1)
  candidate = mc.Candidate(1, 1, 1)
  key = cache.key(config, candidate, 1, 'float32')
  other = config.copy_and_resolve_references()
  other.plan.device_memory_gib = 80  # plan.* keys do not change the compile
  assert cache.key(other, candidate, 1, 'float32') == key
  other.model.width = 64
  assert cache.key(other, candidate, 1, 'float32') != key
  assert cache.key(config, candidate, 2, 'float32') != key


def test_the_plans_fast_compile_reads_the_same_program_as_a_default_one():
  candidate = mc.Candidate(2, 2, 2, shard_update=True)
  fast, default_compile = (
      mesh_plan.compile_candidate(_tiny_vit(1), candidate, 10, dtype='bfloat16',
                                  compiler_options=options)
      for options in (mesh_plan.PLAN_COMPILER_OPTIONS, {}))
  assert fast == default_compile
  assert fast['collectives'] and fast['peak'] > 0


_LOOPS = """
%inner_body (p: f32[8]) -> f32[8] {
  %ar.2 = f32[8]{0} all-reduce(f32[8]{0} %p), replica_groups={{0,1}}, to_apply=%sum
}
%outer_body (p: f32[8]) -> f32[8] {
  %ag = f32[8]{0} all-gather(f32[4]{0} %p), replica_groups={{0,1}}, dimensions={0}
  %w2 = f32[8]{0} while(%p), condition=%c2, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
}
%unknown_body (p: f32[8]) -> f32[8] {
  %ar.3 = f32[8]{0} all-reduce(f32[8]{0} %p), replica_groups={{0,1}}, to_apply=%sum
}
ENTRY %main (x: f32[8]) -> f32[8] {
  %ar.1 = f32[8]{0} all-reduce(f32[8]{0} %x), replica_groups={{0,1}}, to_apply=%sum
  %w1 = f32[8]{0} while(%x), condition=%c1, body=%outer_body, backend_config={"known_trip_count":{"n":"2"}}
  %w3 = f32[8]{0} while(%x), condition=%c3, body=%unknown_body
}
"""


def test_a_collective_in_a_loop_runs_its_trip_count_times_its_callers():
  runs = [(op['op'], op['runs']) for op in hlo_collectives.collectives_in(_LOOPS)]
  # Inner: 3 trips inside 2; the loop of no known count: once.
  assert runs == [('all-reduce', 6), ('all-gather', 2), ('all-reduce', 1), ('all-reduce', 1)]


def test_accumulation_counts_its_loops_collectives_and_flops_once_a_micro_batch():
  # 2 micro-batches of 2 images a device against one batch of 2 a device:
  # the same gradient program, run twice. In bfloat16, the GPUs' dtype: in
  # float32 XLA:CPU's count of the loop falls a third short of the one-batch
  # program's (docs/mesh-planner.md).
  links = mesh_from_probe.configured(_tiny_vit(1).plan).links
  config = _tiny_vit(1)
  config.batch_size = 16
  raw = mesh_plan.compile_candidate(config, mc.Candidate(2, 2, 2, grad_accum=2), 10,
                                    dtype='bfloat16')
  accumulated = mesh_plan.costed(raw, links)
  config.batch_size = 8
  one = mesh_plan.costed(mesh_plan.compile_candidate(
      config, mc.Candidate(2, 2, 2), 10, dtype='bfloat16'), links)
  assert accumulated['flops'] == pytest.approx(2 * one['flops'], rel=0.02)
  # The gathers of parameters leave the loop (they do not change in it);
  # the activations' collectives stay in it and run once a micro-batch.
  assert {op['runs'] for op in raw['collectives']} == {1, 2}
  assert sum(c['count'] for c in accumulated['collectives'].values()) == sum(
      op['runs'] for op in raw['collectives'])


def _all_reduces_over(raw, devices):
  return [op for op in raw['collectives']
          if op['op'] == 'all-reduce' and len(op['group']) == devices]


def test_accumulation_reduces_the_gradients_over_data_once_a_step():
  # data=8: the gradients' all-reduce over all 8 devices runs once, after
  # the loop, and moves what one batch's does; none is left in the loop.
  config = _tiny_vit(1)
  one = mesh_plan.compile_candidate(config, mc.Candidate(8, 1, 1), 10, dtype='float32')
  config.batch_size = 32
  accumulated = mesh_plan.compile_candidate(config, mc.Candidate(8, 1, 1, grad_accum=2), 10,
                                            dtype='float32')
  gradients = lambda raw: sum(op['bytes'] * op['runs'] for op in _all_reduces_over(raw, 8)
                              if op['bytes'] > 1024)
  assert {op['runs'] for op in _all_reduces_over(accumulated, 8) if op['bytes'] > 1024} == {1}
  assert gradients(accumulated) == pytest.approx(gradients(one), rel=1e-3)


def test_a_model_with_batch_norm_keeps_one_reduction_a_micro_batch():
  # Its statistics span the whole micro-batch: each micro-batch's forward
  # pass reduces them over data, and the gradients stay in the loop too.
  config = default.get_config()
  config.model.name, config.model.width = 'resnet18', 8
  config.data.image_size, config.batch_size = 32, 32
  config.data.num_synthetic_classes = 10
  raw = mesh_plan.compile_candidate(config, mc.Candidate(8, 1, 1, grad_accum=2), 10,
                                    dtype='float32')
  assert {op['runs'] for op in _all_reduces_over(raw, 8)} == {2}


def test_the_trainers_flops_count_every_micro_batch():
  from trainer import experiment, mfu  # pylint: disable=g-import-not-at-top
  counts = []
  for accum, batch in ((1, 8), (2, 16)):
    config = _tiny_vit(1)
    config.batch_size, config.grad_accum_steps = batch, accum
    counts.append(mfu.train_step_flops(experiment.build_without_data(config, 10)))
  assert counts[1] == pytest.approx(2 * counts[0], rel=0.02)
