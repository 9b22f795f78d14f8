"""Checkpoints: equal state after save and restore, onto the same or another
mesh; only complete checkpoints count; the last K are kept."""

import os

import jax
import numpy as np
import pytest

from cli.errors import UsageError
from tests.test_train_step import _config, build, run_steps
from trainer import checkpointing


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


def test_only_the_last_k_checkpoints_are_kept(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=2)
  for step in (1, 2, 3, 4):
    checkpointer.save(step, trained, {'step': step})
  checkpointer.close()
  assert checkpointing.Checkpointer(str(tmp_path), keep=2).all_steps() == [3, 4]


def test_an_unfinished_checkpoint_is_never_the_latest(tmp_path, trained):
  checkpointer = checkpointing.Checkpointer(str(tmp_path), keep=3)
  checkpointer.save(1, trained, {'step': 1})
  checkpointer.close()
  # What an interrupted save leaves behind: orbax's temporary directory.
  os.makedirs(tmp_path / checkpointing.LATEST_DIR / '5.orbax-checkpoint-tmp' / 'state')
  assert checkpointing.Checkpointer(str(tmp_path), keep=3).latest_step() == 1


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
