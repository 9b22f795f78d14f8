"""AlexNet, VGG-16/19, GoogLeNet: published sizes, small inputs, axis names."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import sharding
from models import alexnet
from models import create_model
from models import has_batch_norm

ERA_MODELS = ('alexnet', 'vgg16', 'vgg19', 'googlenet')
# The first conv's channels; every layer scales by width / 64. Narrow models
# compile and run in a fraction of the time, through the same code paths.
TINY_WIDTH = 8
IMAGE_SIZE = 32
NUM_CLASSES = 10


def _init(model, image_size=IMAGE_SIZE, batch=2):
  x = jnp.zeros((batch, image_size, image_size, 3), jnp.float32)
  # 'rbg' keys: threefry's bit generation compiles slowly on CPU.
  return model.init(jax.random.key(0, impl='rbg'), x, train=False)


def _tiny(name, **kwargs):
  return create_model(name, num_classes=NUM_CLASSES, width=TINY_WIDTH,
                      image_size=IMAGE_SIZE, **kwargs)


@functools.lru_cache(maxsize=None)
def _abstract(name):
  return jax.eval_shape(lambda: _init(_tiny(name)))


# --- Published sizes ---------------------------------------------------------


@pytest.mark.parametrize('name, expected', [
    ('alexnet', 61_100_840),
    ('vgg16', 138_357_544),
    ('vgg19', 143_667_240),
    ('googlenet', 6_624_904),
])
def test_published_parameter_counts_at_1000_classes(name, expected):
  model = create_model(name, num_classes=1000, image_size=224)
  variables = jax.eval_shape(lambda: _init(model, 224, batch=1))
  params = nn.unbox(variables['params'])
  assert sum(p.size for p in jax.tree.leaves(params)) == expected


# --- Forward and backward at 32 px -------------------------------------------


def _host_variables(name):
  """Variables of the tiny model, drawn on the host: He-scaled normal kernels,
  zero biases, BatchNorm at scale 1 and unit running variance. XLA's CPU
  backend expands every parameter's random draw into its own bit generator,
  which makes compiling model.init cost as much as the training step."""
  rng = np.random.default_rng(0)

  def value(path, leaf):
    key = path[-1].key
    if key == 'kernel':
      fan_in = np.prod(leaf.shape[:-1])
      return rng.normal(0, np.sqrt(2 / fan_in), leaf.shape).astype(np.float32)
    return np.full(leaf.shape, key in ('scale', 'var'), np.float32)

  return jax.tree_util.tree_map_with_path(
      value, nn.unbox(_abstract(name)))


# XLA's CPU backend spends most of a test's time optimising machine code that
# runs once on two images; its lowest level compiles GoogLeNet's backward
# pass about twice as fast. The HLO passes, and so the numerics, are the same.
_FAST_COMPILE = {'xla_backend_optimization_level': 0}


@pytest.mark.parametrize('name', ERA_MODELS)
def test_tiny_model_trains_forward_and_backward_at_32px(name):
  model = _tiny(name)
  variables = _host_variables(name)
  x = jax.random.normal(jax.random.key(1), (2, IMAGE_SIZE, IMAGE_SIZE, 3))
  labels = jnp.array([3, 7])

  def step(variables, x):
    rest = {k: v for k, v in variables.items() if k != 'params'}

    def loss(params):
      logits, updates = model.apply({**rest, 'params': params}, x,
                                    train=True, mutable=['batch_stats'])
      one_hot = jax.nn.one_hot(labels, NUM_CLASSES)
      cross_entropy = -jnp.sum(one_hot * jax.nn.log_softmax(logits), -1)
      return jnp.mean(cross_entropy), (logits, updates)

    (value, (logits, updates)), grads = jax.value_and_grad(
        loss, has_aux=True)(variables['params'])
    return value, logits, grads, updates

  compiled = jax.jit(step).lower(variables, x).compile(_FAST_COMPILE)
  value, logits, grads, updates = compiled(variables, x)
  assert logits.shape == (2, NUM_CLASSES)
  assert logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits)) and np.isfinite(value)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  # The gradient reaches the first conv, back through every pool.
  first = 'stage1' if name.startswith('vgg') else 'conv1'
  assert any(np.any(g != 0) for g in jax.tree.leaves(grads[first]))
  # Train mode moves the running statistics of the models that keep them.
  assert ('batch_stats' in updates) == has_batch_norm(name)
  if has_batch_norm(name):
    assert any(not np.allclose(b, a) for b, a in zip(
        jax.tree.leaves(variables['batch_stats']),
        jax.tree.leaves(updates['batch_stats'])))


# --- Logical partitioning ----------------------------------------------------


@pytest.mark.parametrize('name', ERA_MODELS)
def test_every_parameter_carries_logical_axis_names(name):
  variables = _abstract(name)
  leaves = jax.tree.leaves(
      variables['params'], is_leaf=lambda x: isinstance(x, nn.Partitioned))
  assert leaves
  for leaf in leaves:
    assert isinstance(leaf, nn.LogicallyPartitioned), (name, leaf)
    assert len(leaf.names) == leaf.value.ndim
  for leaf in jax.tree.leaves(variables):
    assert leaf.dtype == jnp.float32
  assert ('batch_stats' in variables) == has_batch_norm(name)


@pytest.mark.parametrize('name', ERA_MODELS)
def test_bfloat16_compute_keeps_float32_params_and_float32_logits(name):
  model = _tiny(name, dtype='bfloat16')
  x = jnp.zeros((2, IMAGE_SIZE, IMAGE_SIZE, 3))
  variables = jax.eval_shape(lambda: _init(model))
  assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(variables))
  logits, _ = jax.eval_shape(lambda v: model.apply(
      v, x, train=True, mutable=['batch_stats']), variables)
  assert logits.dtype == jnp.float32


def test_only_googlenet_and_the_resnets_have_batch_norm():
  assert [n for n in ERA_MODELS if has_batch_norm(n)] == ['googlenet']
  assert has_batch_norm('resnet50')
  assert not has_batch_norm('vit_b16')


def _mesh_axes(name, config_rules):
  """Mesh axes of each parameter under configs/sharding.py's rules, read as
  trainer/mesh.py reads them ('data,fsdp' -> ('data', 'fsdp'))."""
  rules = []
  for logical, mesh_axes in config_rules:
    axes = tuple(filter(None, mesh_axes.split(',')))
    single = axes[0] if axes else None
    rules.append((logical, axes if len(axes) > 1 else single))
  specs = nn.get_partition_spec(_abstract(name)['params'])
  is_spec = lambda s: isinstance(s, jax.sharding.PartitionSpec)
  return jax.tree.map(lambda s: nn.logical_to_mesh_axes(s, rules), specs,
                      is_leaf=is_spec)


@pytest.mark.parametrize('name', ['alexnet', 'vgg16'])
def test_fsdp_rules_shard_the_fully_connected_kernels(name):
  axes = _mesh_axes(name, sharding.FSDP)
  assert tuple(axes['fc1']['kernel']) == ('fsdp', None)
  assert tuple(axes['fc2']['kernel']) == (None, 'fsdp')
  assert tuple(axes['head']['kernel']) == ('fsdp', None)
  # Megatron style on top: no mesh axis named twice in one kernel.
  tensor = _mesh_axes(name, sharding.FSDP_TENSOR)
  assert tuple(tensor['fc1']['kernel']) == ('fsdp', 'tensor')
  assert tuple(tensor['fc2']['kernel']) == ('tensor', 'fsdp')


def test_conv_and_classifier_axis_names_follow_resnet():
  specs = nn.get_partition_spec(_abstract('googlenet')['params'])
  assert tuple(specs['conv1']['conv']['kernel']) == (
      None, None, None, 'conv_out')
  branch = specs['inception3a']['branch2']
  assert tuple(branch['conv']['kernel']) == (None, None, 'conv_in', 'conv_out')
  assert 'bias' not in branch['conv']
  assert tuple(branch['bn']['scale']) == ('conv_out',)
  assert tuple(branch['bn']['bias']) == ('conv_out',)
  assert tuple(specs['head']['kernel']) == ('conv_out', 'classes')
  assert tuple(specs['head']['bias']) == ('classes',)
  specs = nn.get_partition_spec(_abstract('vgg16')['params'])
  assert tuple(specs['stage1']['conv1']['kernel']) == (
      None, None, None, 'conv_out')
  assert tuple(specs['stage1']['conv2']['kernel']) == (
      None, None, 'conv_in', 'conv_out')
  assert tuple(specs['stage1']['conv2']['bias']) == ('conv_out',)
  assert tuple(specs['fc1']['kernel']) == ('embed', 'mlp')
  assert tuple(specs['fc2']['kernel']) == ('mlp', 'embed')
  assert tuple(specs['head']['kernel']) == ('conv_out', 'classes')


def test_googlenet_inception_branch3_is_3x3_as_in_torchvision():
  params = nn.unbox(jax.eval_shape(lambda: _init(
      create_model('googlenet', num_classes=1000), 224, 1))['params'])
  block = params['inception3a']
  assert block['branch3']['conv']['kernel'].shape == (3, 3, 16, 32)
  assert block['branch4']['conv']['kernel'].shape == (1, 1, 192, 32)
  assert params['head']['kernel'].shape == (1024, 1000)


@pytest.mark.parametrize('name, blocks', [('vgg16', 5), ('googlenet', 9)])
def test_full_remat_wraps_each_stage_or_inception_module(name, blocks):
  x = jnp.zeros((2, IMAGE_SIZE, IMAGE_SIZE, 3))

  def count_remats(remat):
    model = _tiny(name, remat=remat)
    jaxpr = jax.make_jaxpr(lambda v: model.apply(
        v, x, train=True, mutable=['batch_stats']))(_abstract(name))
    return str(jaxpr).count('remat')

  assert count_remats('none') == 0
  assert count_remats('full') == blocks


# --- Pooling at any size -----------------------------------------------------


def _torch_adaptive_avg_pool(x, out_h, out_w):
  """torch.nn.AdaptiveAvgPool2d's definition, on NHWC, by loops."""
  n, h, w, c = x.shape
  y = np.zeros((n, out_h, out_w, c), np.float64)
  for i in range(out_h):
    h0, h1 = (i * h) // out_h, -(-((i + 1) * h) // out_h)
    for j in range(out_w):
      w0, w1 = (j * w) // out_w, -(-((j + 1) * w) // out_w)
      y[:, i, j] = x[:, h0:h1, w0:w1].mean(axis=(1, 2))
  return y


@pytest.mark.parametrize('in_size, out_size', [
    ((1, 1), (6, 6)), ((2, 3), (7, 7)), ((13, 13), (6, 6)),
    ((5, 9), (3, 4)), ((14, 14), (7, 7)), ((7, 7), (1, 1)), ((6, 6), (6, 6)),
])
def test_adaptive_avg_pool_matches_torch_bins_at_any_size(in_size, out_size):
  x = np.random.default_rng(0).normal(size=(2, *in_size, 3)).astype(np.float32)
  y = alexnet.adaptive_avg_pool(jnp.asarray(x, jnp.bfloat16), out_size)
  assert y.dtype == jnp.float32  # pooled in float32 whatever the input
  y = alexnet.adaptive_avg_pool(jnp.asarray(x), out_size)
  np.testing.assert_allclose(y, _torch_adaptive_avg_pool(x, *out_size),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('size, window, stride, padding, ceil_mode, expected', [
    (112, 3, 2, 0, True, 56),   # torch: 56 (floor mode would give 55)
    (14, 2, 2, 0, True, 7),
    (7, 3, 2, 0, True, 3),      # ceil and floor agree
    (4, 2, 3, 1, True, 2),      # torch drops a window starting in the padding
    (55, 3, 2, 0, False, 27),
    (28, 3, 1, 1, True, 28),
    (1, 3, 2, 0, False, 1),     # torch fails here; one window over it all
    (1, 2, 2, 0, True, 1),
])
def test_max_pool_sizes_follow_torch_and_never_fail(
    size, window, stride, padding, ceil_mode, expected):
  x = np.random.default_rng(1).normal(size=(1, size, size, 2)).astype(
      np.float32)
  y = np.asarray(alexnet.max_pool(jnp.asarray(x), window, stride, padding,
                                  ceil_mode))
  assert y.shape == (1, expected, expected, 2)
  # Every window of the ceil-mode / undersized padding holds a real element.
  reference = np.full((1, expected, expected, 2), -np.inf, np.float32)
  for i in range(expected):
    for j in range(expected):
      h0, w0 = i * stride - padding, j * stride - padding
      window_x = x[:, max(h0, 0):h0 + window, max(w0, 0):w0 + window]
      reference[:, i, j] = window_x.max(axis=(1, 2))
  np.testing.assert_array_equal(y, reference)
