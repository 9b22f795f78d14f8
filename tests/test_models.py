"""Specification of models/: published sizes, logical axes, dtypes, remat."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import create_model
from models import has_batch_norm
from models import MODEL_NAMES
from models import registry

# Tiny members of each family: the same code paths (stem, projection
# shortcuts, strides, attention, class token) at a fraction of the compile
# time, which dominates on CPU.
TINY = {
    'resnet18': dict(width=8, stage_sizes=(1, 1, 1, 1)),
    'resnet50': dict(width=8, stage_sizes=(1, 1, 1, 1)),
    'vit_ti16': dict(width=32, depth=2, num_heads=2),
    'vit_b32': dict(width=32, depth=2, num_heads=2),
}
IMAGE_SIZE = 32
NUM_CLASSES = 10


def _init(model, image_size=IMAGE_SIZE, batch=2):
  x = jnp.zeros((batch, image_size, image_size, 3), jnp.float32)
  # 'rbg' keys: XLA compiles threefry's bit generation once per parameter,
  # slowly on CPU, and these tests check structure, not the random stream.
  return model.init(jax.random.key(0, impl='rbg'), x, train=False)


@functools.lru_cache(maxsize=None)
def _init_jit(model):
  """Compiled and cached: XLA's compile of the initialisers costs seconds."""
  return jax.jit(lambda: _init(model))()


def _num_params(name, image_size=224, num_classes=1000):
  model = create_model(name, num_classes=num_classes, image_size=image_size)
  variables = jax.eval_shape(lambda: _init(model, image_size, batch=1))
  return sum(p.size for p in jax.tree.leaves(nn.unbox(variables['params'])))


def _tiny(name, **kwargs):
  return create_model(name, num_classes=NUM_CLASSES, image_size=IMAGE_SIZE,
                      **{**TINY[name], **kwargs})


def _images(batch=4, seed=1):
  return jax.random.normal(jax.random.key(seed),
                           (batch, IMAGE_SIZE, IMAGE_SIZE, 3), jnp.float32)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _apply(model, variables, x, train):
  """Logits; in train mode BatchNorm statistics are updated and dropped."""
  if train:
    logits, _ = model.apply(variables, x, train=True, mutable=['batch_stats'])
    return logits
  return model.apply(variables, x, train=False)


# --- Published sizes ---------------------------------------------------------


@pytest.mark.parametrize('name, expected', [
    ('resnet18', 11_689_512),
    ('resnet50', 25_557_032),
    ('vit_b16', 86_567_656),
])
def test_published_models_have_published_parameter_counts(name, expected):
  assert _num_params(name) == expected


@pytest.mark.parametrize('name', MODEL_NAMES)
def test_every_registry_name_builds_a_model_that_initialises(name):
  size = 56 if name.endswith('14') else 64  # a multiple of the patch
  variables = jax.eval_shape(
      lambda: _init(create_model(name, num_classes=5, image_size=size), size, 1))
  head = nn.unbox(variables['params'])['head']
  assert head['bias'].shape == (5,)
  assert ('batch_stats' in variables) == has_batch_norm(name)


# --- Forward pass ------------------------------------------------------------


@pytest.mark.parametrize('train', [False, True])
@pytest.mark.parametrize('name', list(TINY))
def test_tiny_model_maps_images_to_float32_logits(name, train):
  model = _tiny(name)
  logits = _apply(model, _init_jit(model), _images(), train)
  assert logits.shape == (4, NUM_CLASSES)
  assert logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits))


def test_resnet_training_step_updates_batch_stats():
  model = _tiny('resnet18')
  variables = _init_jit(model)
  apply = jax.jit(functools.partial(model.apply, train=True,
                                    mutable=['batch_stats']))
  _, updates = apply(variables, _images())
  before = jax.tree.leaves(variables['batch_stats'])
  after = jax.tree.leaves(updates['batch_stats'])
  assert any(not np.allclose(b, a) for b, a in zip(before, after))


def test_resnet_residual_blocks_start_as_identity_via_zero_bn_scale():
  params = nn.unbox(_init_jit(_tiny('resnet50'))['params'])
  block = params['stage1_block1']
  assert np.all(block['BatchNorm_2']['scale'] == 0)  # last BN of the block
  assert np.all(block['BatchNorm_0']['scale'] == 1)


def test_vit_width_sets_hidden_size_with_mlp_four_times_wider():
  model = create_model('vit_s16', num_classes=3, width=128, depth=1,
                       image_size=IMAGE_SIZE)
  params = nn.unbox(jax.eval_shape(lambda: _init(model))['params'])
  assert params['encoderblock_0']['mlp']['fc1']['kernel'].shape == (128, 512)
  # 128 // 64 = 2 heads of 64.
  assert params['encoderblock_0']['attention']['query']['kernel'].shape == (
      128, 2, 64)


def test_model_depth_sets_the_vit_encoder_blocks_and_is_refused_elsewhere():
  from configs import default  # pylint: disable=g-import-not-at-top
  from core.errors import UsageError  # pylint: disable=g-import-not-at-top
  from cli import validation  # pylint: disable=g-import-not-at-top
  from trainer import experiment  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.model.name, config.model.depth, config.model.width = 'vit_ti16', 3, 64
  config.data.image_size = IMAGE_SIZE
  params = nn.unbox(jax.eval_shape(
      lambda: _init(experiment.create_model(config, NUM_CLASSES)))['params'])
  assert sorted(k for k in params if k.startswith('encoderblock')) == [
      'encoderblock_0', 'encoderblock_1', 'encoderblock_2']
  config.model.name = 'resnet18'
  with pytest.raises(UsageError, match='model.depth=3'):
    validation.check_config(config)
  with pytest.raises(ValueError, match='depth=3'):
    create_model('resnet18', num_classes=NUM_CLASSES, depth=3)


def test_vit_rejects_images_of_another_size_than_it_was_built_for():
  model = _tiny('vit_ti16')
  with pytest.raises(ValueError, match='32x32'):
    _init(model, image_size=64)


# --- Logical partitioning ----------------------------------------------------


def _partition_specs(name):
  variables = jax.eval_shape(lambda: _init(_tiny(name)))
  return nn.get_partition_spec(variables['params'])


def test_every_parameter_carries_logical_axis_names():
  for name in TINY:
    variables = jax.eval_shape(lambda n=name: _init(_tiny(n)))
    leaves = jax.tree.leaves(
        variables['params'], is_leaf=lambda x: isinstance(x, nn.Partitioned))
    for leaf in leaves:
      assert isinstance(leaf, nn.LogicallyPartitioned), (name, leaf)
      assert len(leaf.names) == leaf.value.ndim


def test_resnet_parameters_use_conv_and_class_axis_names():
  specs = _partition_specs('resnet18')
  block = specs['stage2_block1']
  assert tuple(block['Conv_0']['kernel']) == (None, None, 'conv_in', 'conv_out')
  assert tuple(block['proj_conv']['kernel']) == (
      None, None, 'conv_in', 'conv_out')
  assert tuple(block['BatchNorm_0']['scale']) == ('conv_out',)
  assert tuple(block['BatchNorm_0']['bias']) == ('conv_out',)
  assert tuple(specs['head']['kernel']) == ('conv_out', 'classes')
  assert tuple(specs['head']['bias']) == ('classes',)


def test_vit_parameters_use_transformer_axis_names():
  specs = _partition_specs('vit_ti16')
  assert tuple(specs['embedding']['kernel']) == (None, None, None, 'embed')
  assert tuple(specs['embedding']['bias']) == ('embed',)
  assert tuple(specs['cls']) == (None, None, 'embed')
  assert tuple(specs['pos_embedding']) == (None, None, 'embed')
  block = specs['encoderblock_0']
  for proj in ('query', 'key', 'value'):
    assert tuple(block['attention'][proj]['kernel']) == ('embed', 'heads', 'kv')
    assert tuple(block['attention'][proj]['bias']) == ('heads', 'kv')
  assert tuple(block['attention']['out']['kernel']) == ('heads', 'kv', 'embed')
  assert tuple(block['attention']['out']['bias']) == ('embed',)
  assert tuple(block['mlp']['fc1']['kernel']) == ('embed', 'mlp')
  assert tuple(block['mlp']['fc1']['bias']) == ('mlp',)
  assert tuple(block['mlp']['fc2']['kernel']) == ('mlp', 'embed')
  assert tuple(block['mlp']['fc2']['bias']) == ('embed',)
  assert tuple(block['ln1']['scale']) == ('embed',)
  assert tuple(specs['encoder_norm']['bias']) == ('embed',)
  assert tuple(specs['head']['kernel']) == ('embed', 'classes')
  assert tuple(specs['head']['bias']) == ('classes',)


# FSDP on 'fsdp' and tensor parallelism on 'tensor' at once: the hardest
# combination for name clashes between parameter and activation axes.
_HYBRID_RULES = (
    ('batch', ('data', 'fsdp')),
    ('embed', 'fsdp'),
    ('conv_out', 'fsdp'),
    ('mlp', 'tensor'),
    ('heads', 'tensor'),
    ('conv_in', 'tensor'),
)


@pytest.mark.parametrize('name', ['resnet18', 'vit_ti16'])
def test_sharded_model_under_fsdp_and_tensor_rules_matches_unsharded(name):
  model = _tiny(name)
  x = _images(batch=4)
  # Auto axes: XLA propagates shardings, as in the trainer (Explicit axes
  # would turn every logical constraint into an assertion).
  mesh = jax.make_mesh((2, 2, 2), ('data', 'fsdp', 'tensor'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  abstract = jax.eval_shape(lambda: _init(model))
  shardings = nn.logical_to_mesh_sharding(
      nn.get_partition_spec(abstract), mesh, _HYBRID_RULES)
  with jax.set_mesh(mesh), nn.logical_axis_rules(_HYBRID_RULES):
    variables = jax.jit(lambda: _init(model), out_shardings=shardings)()
    sharded = jax.jit(lambda v, x: _apply(model, v, x, train=True))(
        variables, x)
  kernel = nn.unbox(variables['params'])['head']['kernel']
  assert not kernel.sharding.is_fully_replicated
  expected = _apply(model, jax.device_get(variables), x, train=True)
  np.testing.assert_allclose(sharded, expected, rtol=1e-4, atol=1e-4)


# --- Dtypes and rematerialisation --------------------------------------------


@pytest.mark.parametrize('name', ['resnet50', 'vit_ti16'])
def test_bfloat16_compute_keeps_float32_params_and_float32_logits(name):
  model = _tiny(name, dtype='bfloat16')
  for leaf in jax.tree.leaves(jax.eval_shape(lambda: _init(model))):
    assert leaf.dtype == jnp.float32
  # Same variables for both dtypes: the float32 model's (cached) ones.
  variables = _init_jit(_tiny(name))
  logits = _apply(model, variables, _images(), train=True)
  assert logits.dtype == jnp.float32
  reference = _apply(_tiny(name), variables, _images(), train=True)
  np.testing.assert_allclose(logits, reference, rtol=0.1, atol=0.1)


def test_auto_dtype_is_float32_on_cpu_and_explicit_dtypes_are_kept():
  assert jax.default_backend() == 'cpu'
  assert registry.compute_dtype('auto') == 'float32'
  assert registry.compute_dtype('bfloat16') == 'bfloat16'
  assert registry.compute_dtype('float32') == 'float32'
  assert _tiny('resnet50', dtype='auto').dtype == jnp.float32
  assert _tiny('vit_ti16', dtype='bfloat16').dtype == jnp.bfloat16


@pytest.mark.parametrize('name, num_blocks', [('resnet50', 4), ('vit_ti16', 2)])
def test_full_remat_wraps_each_block_in_a_checkpoint(name, num_blocks):
  x = _images()

  def count_remats(remat):
    model = _tiny(name, remat=remat)
    variables = jax.eval_shape(lambda: _init(model))
    jaxpr = jax.make_jaxpr(lambda v: _apply(model, v, x, True))(variables)
    return str(jaxpr).count('remat')

  assert count_remats('none') == 0
  assert count_remats('full') == num_blocks
  assert count_remats('dots') == num_blocks


# One block type each is enough: remat wraps every block class the same way.
@pytest.mark.parametrize('name', ['resnet18', 'vit_b32'])
def test_remat_gives_same_outputs_and_gradients_as_none(name):
  x = _images()
  variables = _init_jit(_tiny(name))

  def logits_and_grads(remat):
    model = _tiny(name, remat=remat)

    def loss(params):
      logits = _apply(model, {**variables, 'params': params}, x, train=True)
      return jnp.sum(logits**2), logits

    return jax.jit(jax.value_and_grad(loss, has_aux=True))(variables['params'])

  (_, logits_none), grads_none = logits_and_grads('none')
  for remat in ('full', 'dots'):
    (_, logits), grads = logits_and_grads(remat)
    np.testing.assert_allclose(logits, logits_none, rtol=1e-5, atol=1e-5)
    for g, g_none in zip(jax.tree.leaves(nn.unbox(grads)),
                         jax.tree.leaves(nn.unbox(grads_none))):
      np.testing.assert_allclose(g, g_none, rtol=1e-4, atol=1e-5)


# --- Errors ------------------------------------------------------------------


def test_unknown_model_name_raises_value_error_listing_accepted_names():
  with pytest.raises(ValueError, match='resnet50.*vit_b16'):
    create_model('resnet51', num_classes=10)


@pytest.mark.parametrize('kwargs', [dict(dtype='float16'), dict(remat='some')])
def test_unknown_dtype_or_remat_raises_value_error(kwargs):
  with pytest.raises(ValueError):
    create_model('resnet18', num_classes=10, **kwargs)
