"""The all-reduce engine: SPMD's update, a ring that sums exactly and sends
what the schedule says, failures that name their worker, and the command
line."""

import threading

import jax
import numpy as np
import pytest

from cli import validation
from core.errors import UsageError
from tests.helpers import run_main
from tests.test_end_to_end import _records, tiny_synthetic_run_flags
from tests.test_ps_engine import _config, _max_difference, _train
from trainer.engines.allreduce import ring as ring_lib
from trainer.engines.emulation import topology


@pytest.mark.parametrize('workers,per_host,algorithm,group,clip', [
    # groups of 4 inside each worker's slice of 8; a flat ring
    (2, 1, 'ring', 4, 0.0),
    # batch norm over each worker's whole slice of 4; two hosts of two
    (4, 2, 'hierarchical', 0, 0.5),
])
def test_all_reduce_gives_the_parameters_of_spmd(workers, per_host, algorithm, group, clip):
  # SPMD (8 devices) normalises over the same groups the workers do.
  spmd_metrics, spmd = _train(_config('spmd', 'resnet18', **{
      'model.bn_group_size': group or 16 // workers, 'grad_clip_norm': clip}))
  metrics, state = _train(_config('allreduce', 'resnet18', **{
      'network.num_workers': workers, 'network.devices_per_host': per_host,
      'allreduce.algorithm': algorithm, 'network.bandwidth_gbps': 2.0,
      'network.intra_host_gbps': 8.0, 'model.bn_group_size': group,
      'grad_clip_norm': clip}))
  if clip:
    assert max(m['grad_norm'] for m in spmd_metrics) > clip  # clipping acts
  np.testing.assert_allclose([m['loss'] for m in metrics],
                             [m['loss'] for m in spmd_metrics], rtol=1e-5)
  # The norm sums squares in another order than SPMD's: rounding only.
  np.testing.assert_allclose([m['grad_norm'] for m in metrics],
                             [m['grad_norm'] for m in spmd_metrics], rtol=1e-4)
  assert _max_difference(state.params, spmd.params) < 1e-5
  assert _max_difference(state.batch_stats, spmd.batch_stats) < 1e-5
  # Momentum sums the gradients unscaled: its rounding is relative.
  for ours, theirs in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(spmd.opt_state)):
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)
  assert metrics[-1]['loss'] != metrics[0]['loss']  # it trained
  for record in metrics:
    assert record['nic_bytes_per_host'] > 0
    assert (record['intra_host_bytes_per_worker'] > 0) == (per_host > 1)
    assert all(record[k] >= 0 for k in ('compute_s', 'allreduce_s', 'update_s', 'wait_s'))


def _run(algorithm, vectors, topo, prepare=None):
  """Every worker's part of one all-reduce, each in its own thread; the
  errors they raised, by worker."""
  allreduce = ring_lib.AllReduce(algorithm, vectors, topo)
  errors = {}

  def worker(i):
    try:
      allreduce.run(i, prepare=None if prepare is None else lambda: prepare(i))
    except BaseException as e:  # pylint: disable=broad-except
      errors[i] = e

  started = [threading.Thread(target=worker, args=(i,)) for i in range(len(vectors))]
  for t in started:
    t.start()
  for t in started:
    t.join(timeout=60)
    assert not t.is_alive(), 'an all-reduce worker hangs'
  return errors


def _vectors(n, size):
  rng = np.random.default_rng(n * 1000 + size)
  # Small integers: every order of additions gives the same float sum.
  return [rng.integers(-100, 100, size).astype(np.float32) for _ in range(n)]


def _topology(n, per_host):
  return topology.Topology(n, per_host, nic_gbps=0.0, nic_latency_ms=0.0)


@pytest.mark.parametrize('n,size', [(1, 5), (2, 7), (3, 3), (4, 1000), (5, 13)])
def test_a_flat_ring_sums_every_vector_and_each_link_carries_2_n_minus_1_segments(n, size):
  vectors = _vectors(n, size)
  expected = np.sum(vectors, axis=0)
  topo = _topology(n, 1)
  assert _run('ring', vectors, topo) == {}
  for v in vectors:
    np.testing.assert_array_equal(v, expected)
  bounds = ring_lib.segment_bounds(size, n)
  assert bounds[0][0] == 0 and bounds[-1][1] == size
  assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1
  length = lambda k: bounds[k % n][1] - bounds[k % n][0]
  for i, nic in enumerate(topo.nics):
    # Worker i sends every segment but (i+1) in the reduce-scatter and every
    # one but (i+2) in the all-gather; it receives every one but i, then
    # every one but (i+1). 4 bytes per element; nothing when alone.
    counters = nic.pop_counters()
    sent = 2 * size - length(i + 1) - length(i + 2)
    received = 2 * size - length(i) - length(i + 1)
    assert counters['tx_bytes'] == (4 * sent if n > 1 else 0)
    assert counters['rx_bytes'] == (4 * received if n > 1 else 0)


@pytest.mark.parametrize('algorithm,n,per_host', [
    ('ring', 8, 2), ('ring', 6, 3), ('hierarchical', 8, 2), ('hierarchical', 6, 3),
    ('hierarchical', 4, 4), ('hierarchical', 4, 1)])
def test_hosts_share_a_nic_through_which_each_algorithm_sends_its_share(
    algorithm, n, per_host):
  size = 6000
  vectors = _vectors(n, size)
  expected = np.sum(vectors, axis=0)
  topo = _topology(n, per_host)
  assert _run(algorithm, vectors, topo) == {}
  for v in vectors:
    np.testing.assert_array_equal(v, expected)
  hosts = n // per_host
  # Each host's NIC sends what its last worker sends to the next host under
  # a flat ring, 2(N-1)/N of the vector, and under hierarchical 2(H-1)/H of
  # it (G rings across the hosts, each on 1/G); every other byte stays
  # inside the host.
  for nic in topo.nics:
    sent = nic.pop_counters()['tx_bytes'] / 4
    if algorithm == 'ring':
      assert abs(sent - 2 * (n - 1) / n * size) <= 2
    else:
      assert abs(sent - 2 * (hosts - 1) / hosts * size) <= 2 * per_host
  inside = sum(port.pop_counters()['tx_bytes'] for port in topo.ports) / 4
  if algorithm == 'ring':  # the other N - H edges of the ring
    assert abs(inside - (n - hosts) * 2 * (n - 1) / n * size) <= 2 * n
  else:  # a reduce-scatter and an all-gather inside each host
    assert abs(inside - hosts * per_host * 2 * (per_host - 1) / per_host * size) <= 2 * n


@pytest.mark.parametrize('algorithm', ['ring', 'hierarchical'])
def test_a_failing_worker_breaks_every_ring_instead_of_hanging_them(algorithm):
  n = 8
  vectors = [np.ones(64, np.float32) for _ in range(n)]

  def fail_if_5(i):
    if i == 5:  # before its ring steps, as a worker whose device failed
      raise RuntimeError('worker 5 lost its device')

  errors = _run(algorithm, vectors, _topology(n, 2), prepare=fail_if_5)
  assert str(errors.pop(5)) == 'worker 5 lost its device'
  assert len(errors) == n - 1
  assert all(isinstance(e, threading.BrokenBarrierError) for e in errors.values())


@pytest.mark.parametrize('overrides,message', [
    ({'allreduce.algorithm': 'tree'}, "allreduce.algorithm='tree'"),
    ({'network.devices_per_host': 0}, 'network.devices_per_host=0'),
    ({'network.intra_host_gbps': float('nan')}, 'network.intra_host_gbps=nan must be'),
    ({'mesh.fsdp': 2}, 'engine=allreduce emulates data parallelism only'),
    ({'mesh.shard_update': True}, 'engine=allreduce updates on its own'),
    ({'network.bandwidth_gbps': -1.0}, 'network.bandwidth_gbps=-1.0 must be'),
])
def test_bad_all_reduce_settings_are_refused_in_one_line(overrides, message):
  config = _config('allreduce', 'resnet18', **overrides)
  with pytest.raises(UsageError) as error:
    validation.check_config(config)
  assert message in str(error.value) and '\n' not in str(error.value)


def test_more_workers_than_devices_or_an_uneven_batch_is_refused():
  config = _config('allreduce', 'resnet18', **{'network.num_workers': 3})
  with pytest.raises(UsageError, match='does not divide over the 3 workers'):
    validation.check_against_devices(config, num_devices=8, num_processes=1)
  config = _config('allreduce', 'resnet18', **{'network.num_workers': 16})
  with pytest.raises(UsageError, match='only 8 devices'):
    validation.check_against_devices(config, num_devices=8, num_processes=1)
  config = _config('allreduce', 'resnet18', **{'network.num_workers': 4,
                                               'network.devices_per_host': 3})
  with pytest.raises(UsageError, match='devices_per_host=3 does not divide the 4 workers'):
    validation.check_against_devices(config, num_devices=8, num_processes=1)


def test_an_all_reduce_run_from_the_command_line_logs_its_phases_and_resumes_under_spmd(tmp_path):
  flags = tiny_synthetic_run_flags(
      num_train_steps=3, log_every_steps=1, eval_every_steps=100, engine='allreduce',
      **{'network.num_workers': 4, 'network.bandwidth_gbps': 4.0})
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'allreduce' in result.stderr and 'compute' in result.stderr  # time split
  record = _records(workdir, 'train')[-1]
  assert record['nic_bytes_per_host'] > 0 and record['allreduce_s'] > 0
  # Its checkpoint is an SPMD checkpoint.
  result = run_main(f'--workdir={workdir}', '--config.engine=spmd',
                    '--config.num_train_steps=4')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 3' in result.stderr


def test_workers_that_cannot_hold_their_state_are_refused_before_anything_runs():
  # pylint: disable=g-import-not-at-top
  from trainer import engines
  from trainer import experiment
  # pylint: enable=g-import-not-at-top
  config = _config('allreduce', 'vit_ti16', **{'network.num_workers': 2,
                                               'runtime.device_memory_gib': 1e-4})
  with pytest.raises(UsageError) as error:
    engines.create_engine(experiment.build_experiment(config, '/nonexistent'))
  message = str(error.value)
  assert "all-reduce workers' gradient program does not fit" in message
  assert 'optimiser state' in message and '\n' not in message
