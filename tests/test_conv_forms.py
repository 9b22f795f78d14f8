"""The convolution forms compute the same thing with the same parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import conv_forms
from models import registry

_NHWC = jax.lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


@pytest.mark.parametrize('side,kernel,stride,padding,cin,cout', [
    (9, 3, 1, ((1, 1), (1, 1)), 4, 8),
    (9, 3, 2, ((1, 1), (1, 1)), 4, 8),
    (8, 7, 2, ((3, 3), (3, 3)), 3, 5),
    (8, 1, 2, ((0, 0), (0, 0)), 6, 4),
    (2, 3, 1, ((1, 1), (1, 1)), 8, 8),   # the small-spatial case
    (11, 5, 3, ((2, 1), (0, 2)), 2, 3),  # uneven padding and stride
])
def test_patches_equal_xla_forward_and_backward(side, kernel, stride, padding, cin, cout):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(2, side, side, cin)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(kernel, kernel, cin, cout)), jnp.float32)

  def loss(form, x, w):
    y = conv_forms.conv_function(form)(x, w, (stride, stride), padding,
                                       dimension_numbers=_NHWC)
    return jnp.sum(jnp.sin(y)), y

  (_, y_xla), g_xla = jax.jit(jax.value_and_grad(
      lambda x, w: loss('xla', x, w), argnums=(0, 1), has_aux=True))(x, w)
  (_, y_patch), g_patch = jax.jit(jax.value_and_grad(
      lambda x, w: loss('patches', x, w), argnums=(0, 1), has_aux=True))(x, w)
  np.testing.assert_allclose(y_patch, y_xla, rtol=1e-5, atol=1e-4)
  for a, b in zip(g_patch, g_xla):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_by_shape_rule():
  same = ((1, 1), (1, 1))
  # ResNet-18's last stage at 64 px: 2x2 outputs, 512 channels.
  assert conv_forms.prefers_patches((16, 2, 2, 512), (3, 3, 512, 512), (1, 1), same)
  assert conv_forms.prefers_patches((16, 14, 14, 256), (3, 3, 256, 512), (2, 2), same)
  # Large stride-1 outputs and narrow layers keep XLA's convolution.
  assert not conv_forms.prefers_patches((8, 56, 56, 64), (3, 3, 64, 64), (1, 1), same)
  assert not conv_forms.prefers_patches((16, 4, 4, 32), (3, 3, 32, 32), (1, 1), same)
  # A 1x1 kernel is a matmul at any size and width (ResNet-50's bottlenecks).
  valid = ((0, 0), (0, 0))
  assert conv_forms.prefers_patches((8, 56, 56, 64), (1, 1, 64, 256), (1, 1), valid)
  assert conv_forms.prefers_patches((8, 16, 16, 16), (1, 1, 16, 32), (2, 2), valid)


def test_unknown_form():
  with pytest.raises(ValueError, match='unknown conv form'):
    conv_forms.conv_function('winograd')


@pytest.mark.parametrize('name,size,form,overrides', [
    ('resnet18', 32, 'by_shape', {'stage_sizes': (1, 1, 1, 1)}),
    ('alexnet', 64, 'patches', {}),
])
def test_models_same_parameters_and_results_in_every_form(name, size, form, overrides):
  """A checkpoint of one form is a checkpoint of the other: same parameter
  tree from the same seed, same logits and gradients up to rounding."""
  x = jnp.asarray(np.random.default_rng(1).normal(size=(4, size, size, 3)), jnp.float32)
  results = {}
  for f in ('xla', form):
    # Width 16: the later layers have >= 64 channels, so by_shape mixes forms.
    model = registry.create_model(name, num_classes=5, width=16, conv_form=f,
                                  image_size=size, **overrides)
    variables = jax.jit(lambda x: model.init(jax.random.key(0), x, train=False))(x)

    def loss(params):
      logits, _ = model.apply({**variables, 'params': params}, x, train=True,
                              mutable=['batch_stats'])
      return jnp.sum(logits ** 2), logits
    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
        variables['params'])
    results[f] = (variables['params'], logits, grads)
  (base_params, base_logits, base_grads), (params, logits, grads) = (
      results['xla'], results[form])
  assert jax.tree.structure(params) == jax.tree.structure(base_params)
  jax.tree.map(np.testing.assert_array_equal, params, base_params)
  np.testing.assert_allclose(logits, base_logits, rtol=1e-4, atol=1e-4)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4),
               grads, base_grads)
