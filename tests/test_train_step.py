"""The SPMD train step: it learns, the state is split and placed as the
config's mesh says, and the optimiser follows the config. (Equality across
meshes is in test_parallelism.py.)"""

import functools

import jax
import jax.numpy as jnp
from flax import linen as nn
import numpy as np
import pytest

from configs import default
from models import registry
from trainer import mesh as mesh_lib
from trainer import optim
from trainer import state as state_lib
from trainer import step_functions

IMAGE_SIZE = 16
BATCH = 16
NUM_CLASSES = 5


def _config(**mesh):
  config = default.get_config()
  config.batch_size = BATCH
  config.learning_rate = 0.4
  for axis, size in mesh.items():
    config.mesh[axis] = size
  return config


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  return {
      'image': rng.integers(0, 256, (BATCH, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
      'label': rng.integers(0, NUM_CLASSES, (BATCH,), np.int32),
  }


def build(config, devices, width=4):
  """Model, optimiser, schedule, mesh and state shardings for a tiny ResNet."""
  mesh = mesh_lib.create_mesh(config.mesh, devices=devices)
  rules = mesh_lib.logical_axis_rules(config)
  model = registry.create_model('resnet18', num_classes=NUM_CLASSES, width=width)
  lr_fn = optim.create_learning_rate_fn(config, steps_per_epoch=10, total_steps=10)
  tx = optim.create_optimizer(config, lr_fn)
  shardings = state_lib.state_shardings(model, tx, IMAGE_SIZE, mesh, rules,
                                       shard_update=config.mesh.shard_update)
  return model, tx, lr_fn, mesh, shardings


def run_steps(config, devices, num_steps=2, width=4):
  """Losses and final params of `num_steps` steps on a mesh over `devices`."""
  model, tx, lr_fn, mesh, shardings = build(config, devices, width)
  state = state_lib.create_train_state(model, tx, IMAGE_SIZE, shardings, seed=0)
  step_fn = jax.jit(functools.partial(step_functions.train_step, model=model, tx=tx,
                                      learning_rate_fn=lr_fn, label_smoothing=0.1),
                    in_shardings=(shardings, mesh_lib.batch_sharding(mesh)),
                    out_shardings=(shardings, None))
  losses = []
  for i in range(num_steps):
    batch = jax.device_put(_batch(i), mesh_lib.batch_sharding(mesh))
    state, metrics = step_fn(state, batch)
    losses.append(float(metrics['loss']))
  return losses, jax.device_get(state), state


def test_training_reduces_loss_on_a_repeated_batch():
  config = _config(data=8)
  mesh = mesh_lib.create_mesh(config.mesh)
  model = registry.create_model('resnet18', num_classes=NUM_CLASSES, width=4)
  tx = optim.create_optimizer(config, lambda step: 0.05)
  shardings = state_lib.state_shardings(model, tx, IMAGE_SIZE, mesh, ())
  state = state_lib.create_train_state(model, tx, IMAGE_SIZE, shardings, seed=0)
  step_fn = jax.jit(functools.partial(step_functions.train_step, model=model, tx=tx,
                                      learning_rate_fn=lambda s: 0.05,
                                      label_smoothing=0.0))
  batch = jax.device_put(_batch(0), mesh_lib.batch_sharding(mesh))
  losses = []
  for _ in range(8):
    state, metrics = step_fn(state, batch)
    losses.append(float(metrics['loss']))
  assert losses[-1] < 0.5 * losses[0]


def test_state_is_created_with_its_target_sharding():
  config = _config(data=1, fsdp=8)
  config.sharding_rules = (('batch', 'data,fsdp'), ('conv_out', 'fsdp'))
  _, _, state = run_steps(config, jax.devices(), num_steps=0, width=8)
  kernels = [x for x in jax.tree.leaves(state.params) if x.ndim == 4]
  momenta = [x for x in jax.tree.leaves(state.opt_state) if x.ndim == 4]
  assert kernels and len(momenta) == len(kernels)
  for x in kernels + momenta:
    assert x.addressable_shards[0].data.shape[-1] * 8 == x.shape[-1]


def test_a_dimension_the_mesh_does_not_divide_stays_replicated():
  config = _config(data=1, fsdp=8)
  config.sharding_rules = (('batch', 'data,fsdp'), ('conv_out', 'fsdp'))
  _, _, state = run_steps(config, jax.devices(), num_steps=0, width=4)
  four_wide = [x for x in jax.tree.leaves(state.params) if x.shape[-1] == 4]
  assert four_wide
  for x in four_wide:
    assert x.addressable_shards[0].data.shape == x.shape


@pytest.mark.parametrize('name', ['vit_ti16', 'resnet18'])
def test_weight_decay_reaches_only_the_real_models_kernels(name):
  model = registry.create_model(name, num_classes=10, width=8 if name == 'resnet18' else 0,
                                image_size=32)
  params = nn.meta.unbox(jax.eval_shape(lambda: model.init(
      jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False))['params'])
  decayed = {'/'.join(str(getattr(k, 'key', k)) for k in path)
             for path, on in jax.tree_util.tree_flatten_with_path(
                 optim.decay_mask(params))[0] if on}
  every = {'/'.join(str(getattr(k, 'key', k)) for k in path): x.ndim
           for path, x in jax.tree_util.tree_flatten_with_path(params)[0]}
  assert decayed and all(every[p] > 1 and p.endswith('kernel') for p in decayed)
  # Every kernel decays; biases, norm scales, the position embedding and
  # the class token do not (DeiT's and the common ViT recipes' exclusions).
  assert decayed == {p for p, ndim in every.items() if p.endswith('kernel')}
  if name == 'vit_ti16':
    assert {'pos_embedding', 'cls'} <= {p.split('/')[-1] for p in every}
    # A parameter-server shard's pieces, keyed by path and rows: the same.
    pieces = {'params/pos_embedding[0:1]': np.zeros((1, 5, 8)),
              'params/encoderblock_0/mlp/fc1/kernel[0:4]': np.zeros((4, 8))}
    assert optim.decay_mask(pieces) == {'params/pos_embedding[0:1]': False,
                                        'params/encoderblock_0/mlp/fc1/kernel[0:4]': True}


def test_learning_rate_scales_linearly_with_batch_and_warms_up():
  config = default.get_config()
  config.learning_rate, config.batch_size, config.warmup_steps = 0.1, 1024, 10
  lr_fn = optim.create_learning_rate_fn(config, steps_per_epoch=100, total_steps=100)
  assert float(lr_fn(0)) == 0.0
  assert float(lr_fn(10)) == pytest.approx(0.4)
  assert float(lr_fn(100)) == pytest.approx(0.0, abs=1e-6)
