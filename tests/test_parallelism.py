"""Data, FSDP, tensor and hybrid parallelism are a config change: every mesh
gives the losses of one device, and the state is split as the rules say."""

import functools

from flax import linen as nn

import jax
import numpy as np
import optax
import pytest

from configs import default
from models import registry
from trainer import mesh as mesh_lib
from trainer import optim
from trainer import state as state_lib
from trainer import step_functions

IMAGE_SIZE, BATCH, NUM_CLASSES, NUM_STEPS = 16, 16, 5, 2

# FSDP on the parameters' wide axis, tensor parallelism on the other: both
# families are sharded on every mesh axis in the hybrid meshes below.
HYBRID_RULES = (
    ('batch', 'data,fsdp'),
    ('embed', 'fsdp'), ('conv_out', 'fsdp'),
    ('mlp', 'tensor'), ('heads', 'tensor'), ('conv_in', 'tensor'),
)
TINY_MODELS = {
    'resnet': lambda: registry.create_model(
        'resnet18', num_classes=NUM_CLASSES, width=8, stage_sizes=(1, 1, 1, 1)),
    'vit': lambda: registry.create_model(
        'vit_ti16', num_classes=NUM_CLASSES, image_size=IMAGE_SIZE, patch_size=4,
        hidden_size=32, mlp_dim=64, num_heads=4, depth=2),
}
MESHES = [(8, 1, 1), (1, 8, 1), (2, 2, 2), (2, 1, 4)]


def _config(mesh_shape, **overrides):
  config = default.get_config()
  config.batch_size = BATCH
  # SGD, not Adam: Adam divides by the gradient's magnitude, so a gradient
  # that is ~0 up to float rounding (which differs between meshes) becomes a
  # full-size update of either sign and parameters cannot be compared.
  config.learning_rate = 0.5
  config.sharding_rules = HYBRID_RULES
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
  for key, value in overrides.items():
    config[key] = value
  return config


def _batches():
  rng = np.random.default_rng(0)
  return [{'image': rng.integers(0, 256, (BATCH, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
           'label': rng.integers(0, NUM_CLASSES, (BATCH,), np.int32)}
          for _ in range(NUM_STEPS)]


def train(model_name, config, devices, num_steps=NUM_STEPS):
  """(losses, final state) of a few steps of a tiny model on `config.mesh`."""
  mesh = mesh_lib.create_mesh(config.mesh, devices=devices)
  rules = mesh_lib.logical_axis_rules(config)
  model = TINY_MODELS[model_name]()
  lr_fn = optim.create_learning_rate_fn(config, steps_per_epoch=10, total_steps=10)
  tx = optim.create_optimizer(config, lr_fn)
  shardings = state_lib.state_shardings(model, tx, IMAGE_SIZE, mesh, rules,
                                       shard_update=config.mesh.shard_update)
  state = state_lib.create_train_state(model, tx, IMAGE_SIZE, shardings, seed=0)
  update_shardings = (state_lib.update_shardings(
      shardings, state_lib.abstract_state(model, tx, IMAGE_SIZE, shardings))
                      if config.mesh.shard_update else None)
  step_fn = jax.jit(
      functools.partial(step_functions.train_step, model=model, tx=tx, learning_rate_fn=lr_fn,
                        grad_accum_steps=config.grad_accum_steps,
                        param_shardings=shardings.params,
                        update_shardings=update_shardings,
                        data_shards=mesh.shape['data']),
      in_shardings=(shardings, mesh_lib.batch_sharding(mesh)),
      out_shardings=(shardings, None))
  losses = []
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    for batch in _batches()[:num_steps]:
      state, metrics = step_fn(state, jax.device_put(batch, mesh_lib.batch_sharding(mesh)))
      losses.append(float(metrics['loss']))
  return losses, state


@pytest.fixture(scope='module', params=sorted(TINY_MODELS))
def single_device(request):
  losses, state = train(request.param, _config((1, 1, 1)), jax.devices()[:1])
  return request.param, losses, jax.device_get(state.params)


@pytest.mark.parametrize('mesh_shape', MESHES, ids=lambda m: 'x'.join(map(str, m)))
def test_every_mesh_gives_the_losses_of_one_device(single_device, mesh_shape):
  model_name, losses_1, params_1 = single_device
  losses, state = train(model_name, _config(mesh_shape), jax.devices())
  np.testing.assert_allclose(losses, losses_1, rtol=2e-5)
  for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(params_1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


def test_sharded_update_gives_the_losses_of_one_device_and_splits_the_momenta(
    single_device):
  model_name, losses_1, params_1 = single_device
  # Pure data parallelism for one model, the split on top of fsdp and
  # tensor axes for the other (one mesh each keeps the suite short).
  mesh_shape = {'resnet': (8, 1, 1), 'vit': (2, 2, 2)}[model_name]
  config = _config(mesh_shape)
  config.mesh.shard_update = True
  losses, state = train(model_name, config, jax.devices())
  np.testing.assert_allclose(losses, losses_1, rtol=2e-5)
  for a, b in zip(jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(params_1)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)
  # The momenta are split over the data axis, on top of any fsdp and tensor
  # split, except leaves too small for it (the 5-class head's bias); the
  # parameters themselves stay whole on the data axis.
  data = mesh_shape[0]
  momenta = [x for x in jax.tree.leaves(state.opt_state) if x.ndim]
  split = [x for x in momenta if 'data' in jax.tree.leaves(tuple(x.sharding.spec))]
  assert sum(x.size for x in split) > 0.99 * sum(x.size for x in momenta)
  for x in split:
    assert x.addressable_shards[0].data.size * data <= x.size
  for x in jax.tree.leaves(state.params):
    assert 'data' not in jax.tree.leaves(tuple(x.sharding.spec))


def test_fsdp_8_splits_vit_params_and_optimizer_state_8_ways():
  _, state = train('vit', _config((1, 8, 1)), jax.devices(), num_steps=0)
  hidden = 32  # the tiny ViT's 'embed' size, the axis the rules give to fsdp
  params = [x for x in jax.tree.leaves(state.params) if hidden in x.shape]
  momenta = [x for x in jax.tree.leaves(state.opt_state) if hidden in x.shape]
  assert len(params) > 10 and len(momenta) == len(params)
  for x in params + momenta:
    assert x.addressable_shards[0].data.size * 8 == x.size, (x.shape, x.sharding.spec)


@pytest.mark.parametrize('mesh_shape,shard_update', [((8, 1, 1), False), ((2, 2, 2), False),
                                                    ((4, 1, 2), True)],
                         ids=['8x1x1', '2x2x2', '4x1x2+ZeRO-1'])
def test_gradient_accumulation_matches_one_batch_of_k_times_the_size(mesh_shape, shard_update):
  config_1, config_k = _config(mesh_shape), _config(mesh_shape, grad_accum_steps=2)
  config_1.mesh.shard_update = config_k.mesh.shard_update = shard_update
  losses_1, state_1 = train('vit', config_1, jax.devices())
  losses_k, state_k = train('vit', config_k, jax.devices())
  np.testing.assert_allclose(losses_k, losses_1, rtol=2e-5)
  for a, b in zip(jax.tree.leaves(jax.device_get(state_k.params)),
                  jax.tree.leaves(jax.device_get(state_1.params))):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)


def test_accumulation_over_data_shards_draws_dropout_per_micro_batch_and_shard():
  # The gradient is the mean over micro-batches i and data shards s of the
  # gradient on shard s's examples i, i+k, ... with dropout drawn from
  # (step's stream, i, s): computed here on one device, piece by piece.
  k, shards, step, seed = 2, 8, 3, 0
  config = _config((shards, 1, 1), grad_accum_steps=k)
  mesh = mesh_lib.create_mesh(config.mesh, devices=jax.devices())
  rules = mesh_lib.logical_axis_rules(config)
  model = registry.create_model('vit_ti16', num_classes=NUM_CLASSES, image_size=IMAGE_SIZE,
                                patch_size=4, hidden_size=32, mlp_dim=64, num_heads=4,
                                depth=2, dropout_rate=0.5)
  params = nn.meta.unbox(jax.jit(model.init, static_argnames='train')(
      jax.random.key(0), np.zeros((1, IMAGE_SIZE, IMAGE_SIZE, 3), np.float32),
      train=False)['params'])
  # A head that is not zero, so that every parameter has a gradient.
  params['head']['kernel'] = np.asarray(
      jax.random.normal(jax.random.key(1), params['head']['kernel'].shape)) * 0.1
  batch = _batches()[0]
  grads = functools.partial(step_functions.compute_gradients, model=model, grad_accum_steps=k,
                            data_shards=shards, seed=seed)
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    sharded = jax.device_put(batch, mesh_lib.batch_sharding(mesh))
    got, _, _ = jax.jit(grads)(params, {}, sharded, step)

  dropout = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), step), 1)
  images = step_functions.normalize_images(batch['image'])
  targets = step_functions.soft_targets(batch['label'], NUM_CLASSES)

  def loss(p, x, y, rng):
    logits = model.apply({'params': p}, x, train=True, rngs={'dropout': rng})
    return optax.softmax_cross_entropy(logits, y).mean()

  share = BATCH // shards
  pieces = []
  for s in range(shards):
    for i in range(k):
      rows = slice(s * share + i, (s + 1) * share, k)
      rng = jax.random.fold_in(jax.random.fold_in(dropout, i), s)
      pieces.append(jax.grad(loss)(params, images[rows], targets[rows], rng))
  want = jax.tree.map(lambda *g: np.mean(g, axis=0), *pieces)
  for a, b in zip(jax.tree.leaves(jax.device_get(got)), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
