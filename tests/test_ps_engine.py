"""The parameter-server engine: SPMD's update when synchronous, bounded
staleness when not, every element on one shard, and links that take the
time their bandwidth says."""

import threading
import time

import jax
import numpy as np
import optax
import pytest

from core.errors import UsageError
from configs import default
from models import registry
from trainer import checkpointing
from trainer import device_input
from trainer import engines
from trainer import specs
from trainer import experiment
from trainer import state as state_lib
from trainer.engines import emulation
from trainer.engines.emulation import link
from trainer.engines.ps import partition
from trainer.engines.ps import state_split
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers

IMAGE_SIZE, BATCH, NUM_CLASSES, NUM_STEPS = 16, 16, 5, 5


def _config(engine, model, **overrides):
  config = default.get_config()
  config.model.name = model
  config.model.width = 8 if model.startswith('resnet') else 32
  if model.startswith('vit'):
    config.model.depth = 2  # what is checked is the engine's, not 12 blocks
  config.model.conv_form = 'xla'  # compiles faster; the forms: test_conv_forms.py
  config.data.source = 'synthetic'
  config.data.image_size = IMAGE_SIZE
  config.data.num_synthetic_classes = NUM_CLASSES
  config.data.num_synthetic_examples = 64
  config.batch_size = BATCH
  config.num_train_steps = NUM_STEPS
  # SGD with momentum and weight decay: Adam divides by ~0 gradients that
  # differ by rounding, which makes parameters incomparable (see
  # test_parallelism.py).
  config.learning_rate = 0.5
  config.engine = engine
  for key, value in overrides.items():
    node, name = config, key
    while '.' in name:
      head, name = name.split('.', 1)
      node = node[head]
    node[name] = value
  return config


def _train(config):
  """(per-step metrics, final state) of NUM_STEPS steps on fixed batches."""
  exp = experiment.build_experiment(config, '/nonexistent')
  engine = engines.create_engine(exp)
  engine.start(state_lib.create_train_state(
      exp.model, exp.tx, IMAGE_SIZE, exp.state_shardings, config.seed))
  rng = np.random.default_rng(0)
  for _ in range(NUM_STEPS):
    batch = {'image': rng.integers(0, 256, (BATCH, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
             'label': rng.integers(0, NUM_CLASSES, (BATCH,), np.int32)}
    engine.step(device_input.to_global(batch, engine.batch_sharding))
  metrics, state = engine.collect_metrics(), jax.device_get(engine.state())
  engine.close()
  return metrics, state


def _max_difference(a, b) -> float:
  return max([float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
              for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))], default=0.0)


@pytest.mark.parametrize('model,overlap,clip', [('vit_ti16', False, 0.0),
                                                ('resnet18', True, 0.1)])
def test_synchronous_ps_gives_the_parameters_of_spmd(model, overlap, clip):
  # 2 workers of 8 examples; SPMD (8 devices) normalises batch norm over the
  # same groups of 8 that the workers see. With overlap, each gradient is
  # sent from inside backprop; the update must not change. Clipping uses the
  # global norm of the mean gradient, which the shards compute together; the
  # batch-norm model is the clipped one (docs/ps-engine.md).
  spmd_metrics, spmd = _train(_config('spmd', model, **{
      'model.bn_group_size': 8, 'grad_clip_norm': clip}))
  # Both workers on one emulated host: they share its NIC.
  ps_metrics, ps = _train(_config('ps', model, **{
      'network.num_workers': 2, 'network.devices_per_host': 2, 'ps.num_shards': 3,
      'ps.overlap': overlap, 'grad_clip_norm': clip}))
  if clip:
    assert min(m['grad_norm'] for m in spmd_metrics) > clip  # clipping acts at every step

  assert int(ps.step) == NUM_STEPS
  np.testing.assert_allclose([m['loss'] for m in ps_metrics],
                             [m['loss'] for m in spmd_metrics], rtol=1e-5)
  assert _max_difference(ps.params, spmd.params) < 1e-5
  assert _max_difference(ps.batch_stats, spmd.batch_stats) < 1e-5
  assert _max_difference(ps.opt_state, spmd.opt_state) < 1e-4
  # A real change happened: not two copies of the initial parameters.
  assert ps_metrics[-1]['loss'] != ps_metrics[0]['loss']
  # Batch norm's running means moved from their zeros: they were compared.
  means = [x for path, x in jax.tree_util.tree_leaves_with_path(ps.batch_stats)
           if 'mean' in jax.tree_util.keystr(path)]
  assert all(np.any(np.asarray(x) != 0) for x in means)
  for record in ps_metrics:
    assert record['push_bytes_shard0'] > 0 and record['pull_bytes_shard0'] > 0
    # One host: its NIC sent every byte the shards received.
    assert record['nic_bytes_per_host'] == sum(
        record[f'push_bytes_shard{j}'] for j in range(3))
    assert all(record[k] >= 0 for k in ('compute_s', 'push_s', 'update_s',
                                         'pull_s', 'wait_s'))


def test_asynchronous_ps_never_applies_a_gradient_staler_than_allowed():
  # A 2-block ViT: what is checked is the engine's; its programs compile
  # fast (once per worker device) and are those of test_ps_failures.py.
  metrics, state = _train(_config('ps', 'vit_ti16', **{
      'network.num_workers': 2, 'ps.num_shards': 2, 'ps.mode': 'async',
      'ps.max_staleness': 1}))
  assert int(state.step) == NUM_STEPS
  # optax's count is in global steps again in the checkpointed state.
  counts = [x for x in jax.tree.leaves(state.opt_state) if np.ndim(x) == 0]
  assert counts and all(int(c) == NUM_STEPS for c in counts)
  assert all(m['staleness_max'] <= 1 for m in metrics)
  assert all(np.isfinite(m['loss']) for m in metrics)


class _Dropping:
  """Worker i's compiled program, except that it reports a non-finite loss
  at each global step t with (t, i) in `dropped` (nonfinite=skip drops that
  gradient)."""

  def __init__(self, worker, compiled, dropped):
    self._worker, self._compiled, self._dropped = worker, compiled, dropped

  def __call__(self, vector, batch, step):
    pushed, metrics = self._compiled(vector, batch, step)
    if (int(step), self._worker) in self._dropped:
      metrics = {**metrics, 'loss': np.float32(np.nan)}
    return pushed, metrics

  def __getattr__(self, name):  # memory_analysis() and the like
    return getattr(self._compiled, name)


def _dropping(compile_async_programs, dropped):
  """compile_async_programs with each program wrapped in _Dropping."""
  def compile_programs(*args, **kwargs):
    return [_Dropping(i, c, dropped)
            for i, c in enumerate(compile_async_programs(*args, **kwargs))]
  return compile_programs


@pytest.mark.parametrize('dropped', [(), ((0, 1), (3, 1))], ids=['all applied', 'two dropped'])
def test_asynchronous_ps_resumes_with_the_step_counts_of_an_uninterrupted_run(
    tmp_path, monkeypatch, dropped):
  # 2 workers, 4 steps; the interrupted run saves a checkpoint after 2 and a
  # new engine resumes from it. optax's counts (one per applied gradient)
  # and the schedule's position (the count in rounds) must be those of the
  # uninterrupted run, also when a dropped gradient leaves a count that N_w
  # does not divide.
  monkeypatch.setattr(workers, 'compile_async_programs',
                      _dropping(workers.compile_async_programs, dropped))
  config = _config('ps', 'vit_ti16', **{
      'network.num_workers': 2, 'ps.num_shards': 2, 'ps.mode': 'async',
      'nonfinite': 'skip', 'learning_rate': 0.01})
  exp = experiment.build_experiment(config, '/nonexistent')
  initial = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, IMAGE_SIZE, exp.state_shardings, config.seed))
  rng = np.random.default_rng(0)
  batches = [{'image': rng.integers(0, 256, (BATCH, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
              'label': rng.integers(0, NUM_CLASSES, (BATCH,), np.int32)}
             for _ in range(4)]

  def run(state, meta, steps):
    """(the shards' counts, the SPMD state's counts, meta) after `steps`."""
    engine = engines.create_engine(exp)
    engine.start(state, meta)
    for batch in steps:
      engine.step(device_input.to_global(batch, engine.batch_sharding))
    engine.collect_metrics()
    shards = [state_split.counts(s.opt_state) for s in engine.cluster.shards]
    state, meta = jax.device_get(engine.state()), engine.checkpoint_meta()
    engine.close()
    assert all(c == shards[0] for c in shards)
    return shards[0], state, meta

  straight, straight_state, _ = run(initial, None, batches)
  _, saved_state, saved_meta = run(initial, None, batches[:2])
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=1, async_save=False)
  checkpointer.save(2, saved_state, saved_meta)
  checkpointer.wait()
  restored_state, restored_meta = checkpointer.restore(2, exp.abstract_state)
  checkpointer.close()
  resumed, resumed_state, _ = run(restored_state, restored_meta, batches[2:])

  assert straight and all(c == 2 * 4 - len(dropped) for c in straight.values())
  assert resumed == straight
  position = lambda counts: {path: c // 2 for path, c in counts.items()}
  assert position(resumed) == position(straight)
  # The SPMD side reads the schedule's position, in global steps.
  assert state_split.counts(resumed_state.opt_state) == position(straight)
  assert state_split.counts(straight_state.opt_state) == position(straight)


def test_only_optax_step_counts_are_read_and_set_as_counts():
  state = (optax.ScaleByScheduleState(count=np.int32(3)),
           {'trace': np.zeros(2, np.float32), 'not_a_count': np.int32(7)})
  assert state_split.counts(state) == {'[0].count': 3}
  changed = state_split.with_counts(state, {'[0].count': 6})
  assert int(changed[0].count) == 6 and changed[0].count.dtype == np.int32
  assert int(changed[1]['not_a_count']) == 7



def test_asynchronous_counts_come_from_the_checkpoint_metadata_that_matches_the_state():
  # 7 updates by 2 workers: 3 global steps in the state, 7 in the metadata.
  meta = state_split.async_counts_meta({'[0].count': 7}, num_workers=2)
  in_steps = lambda count: (optax.ScaleByScheduleState(count=np.int32(count)),)
  assert state_split.async_counts(in_steps(3), meta, 2) == {'[0].count': 7}
  assert state_split.async_counts(in_steps(3), meta, 4) == {'[0].count': 14}  # N_w changed
  # Metadata of another state (a checkpoint the SPMD engine went on from),
  # or none: N_w updates per step.
  assert state_split.async_counts(in_steps(5), meta, 2) == {'[0].count': 10}
  assert state_split.async_counts(in_steps(3), None, 2) == {'[0].count': 6}


# --- The wire ---------------------------------------------------------------

def test_the_wire_carries_float32_and_unpacks_each_variable_in_its_own_dtype():
  params = {'dense': {'kernel': np.arange(6, dtype=np.float16).reshape(2, 3)},
            'scale': np.full((4,), 0.5, np.float32)}
  batch_stats = {'mean': np.arange(3, dtype=np.float32)}
  layout = wire.Layout(wire.flat_variables(params, batch_stats))
  treedefs = jax.tree.structure(params), jax.tree.structure(batch_stats)

  vector = jax.jit(layout.pack)(params, batch_stats)
  assert vector.dtype == wire.DTYPE and vector.shape == (layout.size,)
  np.testing.assert_array_equal(vector, layout.pack_host(params, batch_stats))
  views = layout.views(np.asarray(vector))
  np.testing.assert_array_equal(views['params/dense/kernel'], params['dense']['kernel'])
  back = jax.jit(lambda v: layout.unpack(v, *treedefs))(vector)
  assert jax.tree.structure(back) == jax.tree.structure((params, batch_stats))
  for got, want in zip(jax.tree.leaves(back), jax.tree.leaves((params, batch_stats))):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# --- Partitioning -----------------------------------------------------------

def _variables(name):
  model = registry.create_model(name, num_classes=1000, image_size=224)
  shapes = jax.eval_shape(
      lambda: model.init(jax.random.key(0), np.zeros((1, 224, 224, 3), np.float32),
                         train=False))
  unbox = lambda t: jax.tree.map(lambda x: getattr(x, 'value', x), t,
                                 is_leaf=lambda x: hasattr(x, 'value'))
  return wire.flat_variables(unbox(shapes['params']),
                                    unbox(shapes.get('batch_stats', {})))


@pytest.mark.parametrize('name', ['resnet50', 'vit_b16'])
@pytest.mark.parametrize('num_shards', [4, 8])
def test_greedy_partitioner_owns_every_element_once_and_balances_bytes(name, num_shards):
  variables = _variables(name)
  shards = partition.partition(variables, num_shards, 'greedy')

  owned = {path: np.zeros(max(v.shape[0], 1) if v.shape else 1, int)
           for path, v in variables.items()}
  for pieces in shards:
    for p in pieces:
      owned[p.path][p.start:p.stop] += 1
      assert p.shape == ((p.stop - p.start, *variables[p.path].shape[1:])
                         if variables[p.path].shape else ())
  assert all((rows == 1).all() for rows in owned.values())
  loads = partition.shard_bytes(shards)
  total = sum(int(np.prod(v.shape)) * 4 for v in variables.values())
  assert sum(loads) == total
  assert max(loads) <= 1.10 * total / num_shards
  assert min(loads) >= 0.90 * total / num_shards


def test_round_robin_places_whole_variables_in_turn():
  variables = _variables('resnet18')
  shards = partition.partition(variables, 3, 'round_robin')
  for j, pieces in enumerate(shards):
    assert [p.path for p in pieces] == list(variables)[j::3]
    assert all(p.start == 0 and p.shape == tuple(variables[p.path].shape)
               for p in pieces)


def test_more_shards_than_variables_is_refused():
  variables = _variables('resnet18')
  with pytest.raises(UsageError, match=f'has {len(variables)} variables, which cannot fill'):
    partition.partition(variables, len(variables) + 1, 'round_robin')


def test_more_shards_than_rows_is_refused_before_any_shard_exists():
  """A billion shards: refused at once, not after a billion empty lists."""
  variables = _variables('resnet18')
  with pytest.raises(UsageError, match='rows of variables, which cannot fill 1000000000'):
    partition.partition(variables, 10**9, 'greedy')


def test_shards_the_greedy_cuts_cannot_fill_are_named():
  variables = _variables('resnet18')
  rows = sum(v.shape[0] if v.shape else 1 for v in variables.values())
  with pytest.raises(UsageError, match='fills only'):
    partition.partition(variables, rows, 'greedy')


# --- Links ------------------------------------------------------------------

def _timed_pushes(pairs, nbytes, bandwidth_gbps, latency_ms=0.0):
  workers = [link.Interface(f'w{i}', bandwidth_gbps, latency_ms) for i in range(4)]
  shards = [link.Interface(f's{i}', bandwidth_gbps, latency_ms) for i in range(4)]
  source = np.ones(nbytes // 4, np.float32)
  targets = [np.zeros_like(source) for _ in pairs]
  threads = [threading.Thread(target=link.transfer,
                              args=(workers[w], shards[s], [(t, source)]))
             for (w, s), t in zip(pairs, targets)]
  start = time.perf_counter()
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  elapsed = time.perf_counter() - start
  assert all((t == source).all() for t in targets)  # the bytes really moved
  return elapsed


def test_a_push_on_idle_links_gets_no_transfer_time_for_free():
  # 2.5 MB at 1 Gbit/s is 20 ms. Links idle since they were made may not
  # have banked credit: sleeps never end early, so the push can take longer
  # than its bytes over the bandwidth plus the latency, never less.
  nbytes, gbps, latency_ms = 2_500_000, 1.0, 5.0
  expected = nbytes * 8 / (gbps * 1e9) + latency_ms / 1e3
  for _ in range(3):
    time.sleep(0.05)  # idle again
    assert _timed_pushes([(0, 0)], nbytes, gbps, latency_ms) >= expected


def test_a_push_takes_its_bytes_over_the_bandwidth_plus_latency():
  nbytes, gbps = 40_000_000, 1.0  # 0.32 s at 1 Gbit/s
  expected = nbytes * 8 / (gbps * 1e9)
  assert _timed_pushes([(0, 0)], nbytes, gbps, latency_ms=80) == pytest.approx(
      expected + 0.08, rel=0.15)
  # Two workers into one shard share its interface; into two shards, not.
  assert _timed_pushes([(0, 0), (1, 0)], nbytes, gbps) == pytest.approx(
      2 * expected, rel=0.15)
  assert _timed_pushes([(0, 0), (1, 1)], nbytes, gbps) == pytest.approx(
      expected, rel=0.15)
  # Four workers each sending a quarter to each of four shards: every
  # interface carries X, so it takes X/B (no interface waits for another).
  quarter = [(w, s) for w in range(4) for s in range(4)]
  assert _timed_pushes(quarter, nbytes // 4, gbps) == pytest.approx(
      expected, rel=0.15)


def test_the_tree_program_computes_the_sync_programs_gradients_without_the_wire():
  """What the probe times as an SPMD step holds its parameters
  (tree_compute_s) is the workers' gradient work itself: the same
  gradients and statistics, as trees."""
  config = _config('ps', 'resnet18')
  exp = experiment.build_without_data(config, NUM_CLASSES)
  devices = jax.devices()[:2]
  mesh = workers.worker_mesh(devices)
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, IMAGE_SIZE, jax.sharding.SingleDeviceSharding(devices[0]), 0))
  layout = emulation.layout(exp)
  replicated = jax.sharding.NamedSharding(mesh, jax.P())
  split = jax.sharding.NamedSharding(mesh, jax.P(workers.AXIS))
  batch = jax.device_put(
      specs.random_batch(4, IMAGE_SIZE, np.random.default_rng(0), NUM_CLASSES), split)
  step = jax.device_put(np.int32(0), replicated)
  vectors, _ = workers.compile_sync_program(exp, mesh, layout, batch_size=4)(
      jax.device_put(layout.pack_host(state.params, state.batch_stats), replicated),
      batch, step)
  grads, stats, _ = workers.compile_tree_program(exp, mesh, 4)(
      *jax.device_put((state.params, state.batch_stats), replicated), batch, step)
  for worker, vector in enumerate(np.asarray(vectors)):
    want = layout.views(vector)
    got = [np.asarray(x)[worker] for x in jax.tree.leaves((grads, stats))]
    assert len(got) == len(want)
    for path, value in zip(want, got):
      np.testing.assert_allclose(value, want[path], rtol=1e-5, atol=1e-6, err_msg=path)
