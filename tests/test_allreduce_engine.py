"""The all-reduce engine: SPMD's update, a ring that sums exactly and sends
what the schedule says, failures that name their worker, and the command
line."""

import threading

import numpy as np
import pytest

from configs.errors import UsageError
from tests.helpers import run_main
from tests.test_end_to_end import _records, tiny_synthetic_run_flags
from tests.test_ps_engine import _config, _max_difference, _train
from trainer import validation
from trainer.engines.allreduce import ring as ring_lib
from trainer.engines.emulation import link


@pytest.mark.parametrize('workers,group,bandwidth_gbps,clip', [
    (4, 0, 2.0, 0.0),  # batch norm over each worker's whole slice of 4
    (2, 4, 0.0, 0.5),  # groups of 4 inside each worker's slice of 8
])
def test_all_reduce_gives_the_parameters_of_spmd(workers, group, bandwidth_gbps, clip):
  # SPMD (8 devices) normalises over the same groups the workers do.
  spmd_metrics, spmd = _train(_config('spmd', 'resnet18', **{
      'model.bn_group_size': group or 16 // workers, 'grad_clip_norm': clip}))
  metrics, state = _train(_config('allreduce', 'resnet18', **{
      'network.num_workers': workers, 'network.bandwidth_gbps': bandwidth_gbps,
      'model.bn_group_size': group, 'grad_clip_norm': clip}))
  if clip:
    assert max(m['grad_norm'] for m in spmd_metrics) > clip  # clipping acts
  np.testing.assert_allclose([m['loss'] for m in metrics],
                             [m['loss'] for m in spmd_metrics], rtol=1e-5)
  # The norm sums squares in another order than SPMD's: rounding only.
  np.testing.assert_allclose([m['grad_norm'] for m in metrics],
                             [m['grad_norm'] for m in spmd_metrics], rtol=1e-4)
  assert _max_difference(state.params, spmd.params) < 1e-5
  assert _max_difference(state.batch_stats, spmd.batch_stats) < 1e-5
  assert _max_difference(state.opt_state, spmd.opt_state) < 1e-4
  assert metrics[-1]['loss'] != metrics[0]['loss']  # it trained
  for record in metrics:
    assert record['allreduce_bytes_per_worker'] > 0
    assert all(record[k] >= 0 for k in ('compute_s', 'allreduce_s', 'update_s', 'wait_s'))


def _run_ring(vectors, nics, run=None):
  """Every worker's part of one all-reduce, each in its own thread; the
  errors they raised."""
  ring = ring_lib.Ring(vectors, nics)
  errors = []

  def worker(i):
    try:
      ring.run(i) if run is None else run(ring, i)
    except BaseException as e:  # pylint: disable=broad-except
      errors.append((i, e))

  started = [threading.Thread(target=worker, args=(i,)) for i in range(len(vectors))]
  for t in started:
    t.start()
  for t in started:
    t.join(timeout=60)
    assert not t.is_alive(), 'a ring worker hangs'
  return errors


@pytest.mark.parametrize('n,size', [(1, 5), (2, 7), (3, 3), (4, 1000), (5, 13)])
def test_ring_sums_every_vector_and_each_link_carries_2_n_minus_1_segments(n, size):
  rng = np.random.default_rng(n)
  # Small integers: every order of additions gives the same float sum.
  vectors = [rng.integers(-100, 100, size).astype(np.float32) for _ in range(n)]
  expected = np.sum(vectors, axis=0)
  nics = [link.Interface(f'w{i}', 0.0, 0.0) for i in range(n)]
  assert _run_ring(vectors, nics) == []
  for v in vectors:
    np.testing.assert_array_equal(v, expected)
  bounds = ring_lib.segment_bounds(size, n)
  assert bounds[0][0] == 0 and bounds[-1][1] == size
  assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1
  length = lambda k: bounds[k % n][1] - bounds[k % n][0]
  for i, nic in enumerate(nics):
    # Worker i sends every segment but (i+1) in the reduce-scatter and every
    # one but (i+2) in the all-gather; it receives every one but i, then
    # every one but (i+1). 4 bytes per element; nothing when alone.
    counters = nic.pop_counters()
    sent = 2 * size - length(i + 1) - length(i + 2)
    received = 2 * size - length(i) - length(i + 1)
    assert counters['tx_bytes'] == (4 * sent if n > 1 else 0)
    assert counters['rx_bytes'] == (4 * received if n > 1 else 0)


def test_a_failing_ring_worker_breaks_the_ring_instead_of_hanging_it():
  n = 4
  vectors = [np.ones(64, np.float32) for _ in range(n)]
  nics = [link.Interface(f'w{i}', 0.0, 0.0) for i in range(n)]

  def fail_if_2(i):
    if i == 2:  # before its ring steps, as a worker whose device failed
      raise RuntimeError('worker 2 lost its device')

  def run(ring, i):
    ring.run(i, prepare=lambda: fail_if_2(i))

  errors = dict(_run_ring(vectors, nics, run))
  assert str(errors.pop(2)) == 'worker 2 lost its device'
  assert len(errors) == n - 1
  assert all(isinstance(e, threading.BrokenBarrierError) for e in errors.values())


@pytest.mark.parametrize('overrides,message', [
    ({'allreduce.algorithm': 'tree'}, "allreduce.algorithm='tree'"),
    ({'mesh.fsdp': 2}, 'engine=allreduce emulates data parallelism only'),
    ({'mesh.shard_update': True}, 'engine=allreduce updates on its own'),
    ({'network.bandwidth_gbps': -1.0}, 'network.bandwidth_gbps=-1.0 must be'),
])
def test_bad_all_reduce_settings_are_refused_in_one_line(overrides, message):
  config = _config('allreduce', 'resnet18', **overrides)
  with pytest.raises(UsageError, match='') as error:
    validation.check_config(config)
  assert message in str(error.value) and '\n' not in str(error.value)


def test_more_workers_than_devices_or_an_uneven_batch_is_refused():
  config = _config('allreduce', 'resnet18', **{'network.num_workers': 3})
  with pytest.raises(UsageError, match='does not divide over the 3 workers'):
    validation.check_against_devices(config, num_devices=8, num_processes=1)
  config = _config('allreduce', 'resnet18', **{'network.num_workers': 16})
  with pytest.raises(UsageError, match='only 8 devices'):
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
  assert record['allreduce_bytes_per_worker'] > 0 and record['allreduce_s'] > 0
  # Its checkpoint is an SPMD checkpoint.
  result = run_main(f'--workdir={workdir}', '--config.engine=spmd',
                    '--config.num_train_steps=4')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 3' in result.stderr
