"""Checkpoints: equal state after save and restore, onto the same or another
mesh; only complete checkpoints count; the last K are kept; evaluation and
fine-tuning read the weights alone, straight onto their shardings."""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src.path import async_path
import pytest

from configs import default
from core.errors import UsageError
from modes import eval as eval_mode
from tests.test_train_step import _config, build, run_steps
from trainer import checkpointing
from trainer import experiment
from trainer import init_from
from trainer import state as state_lib
from trainer import tree_paths


@pytest.fixture(scope='module')
def trained():
  """A state after two steps on 8 data-parallel devices."""
  _, _, state = run_steps(_config(data=8), jax.devices(), num_steps=2, width=8)
  return state


def _abstract_like(state, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      state, shardings)


def _assert_trees_equal(a, b):
  leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_save_then_restore_gives_equal_state(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  checkpointer.save(2, trained, {'step': 2})
  checkpointer.wait()
  shardings = jax.tree.map(lambda x: x.sharding, trained)
  restored, meta = checkpointer.restore(2, _abstract_like(trained, shardings))
  checkpointer.close()
  assert meta['step'] == 2
  _assert_trees_equal(restored, trained)


def test_restore_onto_another_mesh_gives_equal_params_with_new_layout(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  checkpointer.save(2, trained, {'step': 2})
  checkpointer.wait()

  config = _config(data=1, fsdp=4)
  config.sharding_rules = (('batch', 'data,fsdp'), ('conv_out', 'fsdp'))
  *_, target = build(config, jax.devices()[:4], width=8)
  restored, _ = checkpointer.restore(2, _abstract_like(trained, target))
  checkpointer.close()
  _assert_trees_equal(restored, trained)
  kernel = [x for x in jax.tree.leaves(restored.params) if x.ndim == 4][-1]
  assert len(kernel.sharding.device_set) == 4
  assert kernel.addressable_shards[0].data.shape[-1] * 4 == kernel.shape[-1]


def test_restore_onto_a_sharded_update_splits_the_optimizer_state(tmp_path, trained):
  """A checkpoint of a replicated optimiser state restores, equal, onto
  mesh.shard_update's layout: the momenta split over the data axis."""
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  checkpointer.save(2, trained, {'step': 2})
  checkpointer.wait()
  config = _config(data=4)
  config.mesh.shard_update = True
  *_, target = build(config, jax.devices()[:4], width=8)
  restored, _ = checkpointer.restore(2, _abstract_like(trained, target))
  checkpointer.close()
  _assert_trees_equal(restored, trained)
  kernels = [x for x in jax.tree.leaves(restored.opt_state) if x.ndim == 4]
  assert kernels and all(
      x.addressable_shards[0].data.size * 4 == x.size for x in kernels)
  assert all(x.sharding.is_fully_replicated for x in jax.tree.leaves(restored.params))


def test_only_the_last_k_checkpoints_are_kept(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  for step in (1, 2, 3, 4):
    checkpointer.save(step, trained, {'step': step})
  checkpointer.close()
  assert checkpointing.Checkpointer(str(tmp_path), keep=2).all_steps() == [3, 4]


def test_a_save_cut_short_before_its_commit_is_never_a_checkpoint(
    tmp_path, trained, monkeypatch):
  """Orbax writes a step into a temporary folder and commits it by renaming
  the folder to the step. A save stopped just before that rename (as a
  SIGKILL there would) leaves every array and item on disk: that folder is
  neither listed nor restored, and a rerun that reaches the step saves it
  again over the leftover."""
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=3)
  checkpointer.save(1, trained, {'step': 1})
  checkpointer.wait()
  rename = async_path.rename

  async def rename_all_but_the_commit(source, target):
    if target.name.isdigit():  # the step folder's own rename: the commit
      raise OSError('save cut short before its commit')
    return await rename(source, target)
  monkeypatch.setattr(async_path, 'rename', rename_all_but_the_commit)
  checkpointer.save(5, trained, {'step': 5})
  with pytest.raises(OSError, match='cut short'):
    checkpointer.wait()
  monkeypatch.undo()
  checkpointer.close()
  checkpoints = tmp_path / checkpointing.LATEST_DIR
  leftover = [name for name in os.listdir(checkpoints) if name != '1']
  assert len(leftover) == 1 and leftover[0].startswith('5.'), leftover
  # Complete but for the commit: both items written and committed inside it.
  assert {'state', 'meta'} <= set(os.listdir(checkpoints / leftover[0]))
  assert (checkpoints / leftover[0] / 'state' / 'commit_success.txt').exists()

  assert checkpointing.all_steps(str(tmp_path)) == [1]
  assert checkpointing.latest_step(str(tmp_path)) == 1
  rerun = checkpointing.Checkpointer(str(tmp_path), keep=3)
  assert rerun.latest_step() == 1
  rerun.save(5, trained, {'step': 5})
  rerun.wait()
  shardings = jax.tree.map(lambda x: x.sharding, trained)
  restored, meta = rerun.restore(5, _abstract_like(trained, shardings))
  rerun.close()
  assert meta['step'] == 5 and sorted(os.listdir(checkpoints)) == ['1', '5']
  _assert_trees_equal(restored, trained)


def test_restoring_into_another_shape_names_the_parameter_and_both_shapes(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  checkpointer.save(2, trained, {'step': 2})
  checkpointer.wait()
  shardings = jax.tree.map(lambda x: x.sharding, trained)
  target = _abstract_like(trained, shardings)
  kernel = target.params['head']['kernel']
  target.params['head']['kernel'] = jax.ShapeDtypeStruct(
      (kernel.shape[0], 7), kernel.dtype, sharding=kernel.sharding)
  with pytest.raises(UsageError, match=r'params/head/kernel has shape \(64, 5\) in '
                     r'the checkpoint but \(64, 7\)'):
    checkpointer.restore(2, target)
  checkpointer.close()


# --- Restoring the weights alone (evaluation, fine-tuning) --------------------


def _tiny_config(workdir_source=''):
  """A 4-wide ResNet-18 with AdamW on synthetic data, its state split fsdp=8."""
  config = default.get_config()
  config.model.name, config.model.width = 'resnet18', 4
  config.data.update(dict(source='synthetic', image_size=16, augment='none',
                          num_synthetic_examples=16, num_synthetic_classes=5))
  config.batch_size = config.eval.batch_size = 8
  config.optimizer = 'adamw'
  config.mesh.data, config.mesh.fsdp = 1, 8
  config.init.from_workdir = workdir_source
  return config


@pytest.fixture(scope='module')
def saved_run(tmp_path_factory):
  """A work dir holding checkpoint 3 of a fresh tiny run, and that state."""
  workdir = str(tmp_path_factory.mktemp('saved'))
  exp = experiment.build_experiment(_tiny_config(), workdir)
  state = state_lib.create_train_state(exp.model, exp.tx, 16, exp.state_shardings, seed=0)
  checkpointer = checkpointing.Checkpointer(workdir)
  checkpointer.save(3, state, {'step': 3})
  checkpointer.close()
  return workdir, state


@pytest.fixture
def arrays_read(monkeypatch):
  """The names and shardings of every array orbax restores, as {path: sharding}."""
  read = {}
  original = ocp.CheckpointManager.restore

  def restore(self, step, *args, **kwargs):
    restored = original(self, step, *args, **kwargs)
    for path, leaf in tree_paths.leaves_by_path(restored.get('state', {})).items():
      if isinstance(leaf, jax.Array):
        read[path] = leaf.sharding
    return restored
  monkeypatch.setattr(ocp.CheckpointManager, 'restore', restore)
  return read


def _assert_read_only_weights_on_their_shardings(read, abstract_state):
  assert read and not any(path.startswith('opt_state') for path in read), sorted(read)
  expected = tree_paths.leaves_by_path(abstract_state)
  for path, sharding in read.items():
    assert sharding == expected[path].sharding, path
  assert any(not s.is_fully_replicated for p, s in read.items() if p.startswith('params/'))


def test_eval_mode_reads_only_weights_onto_the_target_sharding(saved_run, arrays_read):
  workdir, state = saved_run
  summary = eval_mode.evaluate_checkpoint(_tiny_config(), workdir)
  assert summary['step'] == 3 and summary['num_examples'] == 16
  exp = experiment.build_experiment(_tiny_config(), workdir)
  _assert_read_only_weights_on_their_shardings(arrays_read, exp.abstract_state)


def test_fine_tuning_reads_only_weights_onto_the_target_sharding(
    saved_run, arrays_read, tmp_path):
  source, saved = saved_run
  config = _tiny_config(source)
  config.mesh.data, config.mesh.fsdp = 2, 4  # another mesh than the source's
  exp = experiment.build_experiment(config, str(tmp_path))
  fresh = state_lib.create_train_state(exp.model, exp.tx, 16, exp.state_shardings, seed=1)
  tuned = init_from.initialize_from(fresh, config.init)
  _assert_read_only_weights_on_their_shardings(arrays_read, exp.abstract_state)
  _assert_trees_equal(tuned.params, saved.params)
  _assert_trees_equal(tuned.opt_state, fresh.opt_state)  # afresh


def test_a_single_process_save_compiles_nothing(tmp_path):
  """Replicated arrays are written whole within one process: orbax's split
  among replicas would compile a slice per (array, replica) on the first
  save (104 compilations, 5 s, for a tiny ResNet-18 on 8 devices)."""
  mesh = jax.make_mesh((8,), ('data',), axis_types=(jax.sharding.AxisType.Explicit,))
  replicated = jax.NamedSharding(mesh, jax.P())
  # Shapes no other test saves, so no slice program is already compiled.
  state = {f'w{i}': jax.device_put(np.full((24 + i, 8), i, np.float32), replicated)
           for i in range(6)}
  compiles = []
  listener = lambda event, duration, **kwargs: compiles.append(event)
  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=1)
    checkpointer.save(1, state, {'step': 1})
    checkpointer.close()
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  assert '/jax/core/compile/backend_compile_duration' not in compiles
  restored, _ = checkpointing.Checkpointer(str(tmp_path)).restore(
      1, _abstract_like(state, jax.tree.map(lambda x: x.sharding, state)))
  _assert_trees_equal(restored, state)
