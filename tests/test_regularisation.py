"""Stochastic depth (ResNet, ViT) and dropout (ViT): drawn from the step's
random stream (a function of seed and step), off in evaluation, and no
random draws at all when off."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cli import validation
from configs import default
from core.errors import UsageError
from models import drop_path, registry
from trainer import step_functions

IMAGE = 16


def _model(name, **rates):
  width = 64 if name.startswith('vit') else 4
  extra = {'depth': 2, 'patch_size': 8} if name.startswith('vit') else {'stage_sizes': (1, 1)}
  return registry.create_model(name, num_classes=3, width=width, image_size=IMAGE,
                               **extra, **rates)


def _images(n=8, seed=0):
  return jax.random.uniform(jax.random.key(seed), (n, IMAGE, IMAGE, 3))


def _noisy_variables(model):
  """Initial variables with noise: zero-initialised parts (ResNet's last
  batch-norm scales, ViT's head) would hide the branches."""
  leaves, tree = jax.tree.flatten(model.init(jax.random.key(0), _images(2), train=False))
  return jax.tree.unflatten(tree, [
      v + 0.1 * jax.random.normal(jax.random.key(i), v.shape) for i, v in enumerate(leaves)])


def test_block_rates_rise_linearly_from_zero_to_the_rate():
  assert drop_path.linear_rates(0.1, 5) == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1])
  assert drop_path.linear_rates(0.3, 1) == [0.3]


def test_drop_path_keeps_or_drops_whole_examples_and_keeps_the_expectation():
  layer = drop_path.DropPath(0.5)
  x = jnp.ones((2000, 3, 3, 2))
  y = layer.apply({}, x, deterministic=False, rngs={'dropout': jax.random.key(0)})
  per_example = np.asarray(y).reshape(2000, -1)
  assert set(np.unique(per_example)) == {0.0, 2.0}
  assert (per_example == per_example[:, :1]).all()  # the whole branch of an example
  assert 0.45 < per_example[:, 0].mean() / 2 < 0.55
  assert layer.apply({}, x, deterministic=True) is x


@pytest.mark.parametrize('name, rates', [
    ('vit_ti16', {'drop_path_rate': 0.5, 'dropout_rate': 0.2}),
    ('resnet18', {'drop_path_rate': 0.5}),
])
def test_regularised_training_is_a_function_of_its_rng_and_evaluation_of_nothing(name, rates):
  plain, regularised = _model(name), _model(name, **rates)
  variables = _noisy_variables(plain)
  x = _images()

  @jax.jit
  def forward(variables, rng):
    return regularised.apply(variables, x, train=True, rngs={'dropout': rng},
                             mutable=['batch_stats'])[0]

  def train(model, rng):
    if model is plain:
      return np.asarray(plain.apply(variables, x, train=True, mutable=['batch_stats'])[0])
    return np.asarray(forward(variables, jax.random.key(rng)))

  np.testing.assert_array_equal(train(regularised, 1), train(regularised, 1))
  assert not np.allclose(train(regularised, 1), train(regularised, 2))
  assert not np.allclose(train(regularised, 1), train(plain, 1))
  # Evaluation: the regularised model is the plain one.
  np.testing.assert_array_equal(regularised.apply(variables, x, train=False),
                                plain.apply(variables, x, train=False))


def test_off_means_no_random_stream_and_the_train_step_is_unchanged():
  model = _model('vit_ti16', drop_path_rate=0.0, dropout_rate=0.0)
  assert not step_functions.uses_dropout(model)
  assert step_functions.uses_dropout(_model('vit_ti16', dropout_rate=0.1))
  variables = model.init(jax.random.key(0), _images(2), train=False)
  batch = {'image': np.asarray(_images() * 255, np.uint8),
           'label': np.arange(8, dtype=np.int32) % 3}
  plain = _model('vit_ti16')
  got = step_functions.compute_gradients(variables['params'], {}, batch, 3, model=model)
  want = step_functions.compute_gradients(variables['params'], {}, batch, 3, model=plain)
  np.testing.assert_array_equal(got[2]['loss'], want[2]['loss'])


def test_the_train_steps_draws_follow_seed_and_step():
  model = _model('vit_ti16', drop_path_rate=0.5, dropout_rate=0.2)
  params = _noisy_variables(model)['params']
  batch = {'image': np.asarray(_images() * 255, np.uint8),
           'label': np.arange(8, dtype=np.int32) % 3}
  step_loss = jax.jit(lambda step, seed: step_functions.compute_gradients(
      params, {}, batch, step, model=model, seed=seed)[2]['loss'])
  loss = lambda step, seed=0: float(step_loss(step, seed))
  assert loss(5) == loss(5)
  assert loss(5) != loss(6) and loss(5) != loss(5, seed=1)
  # Gradient accumulation draws anew for every micro-batch, and still only
  # from (seed, step).
  accumulated = lambda: float(step_functions.compute_gradients(
      params, {}, batch, 5, model=model, grad_accum_steps=2)[2]['loss'])
  assert accumulated() == accumulated()


@pytest.mark.parametrize('keys, message', [
    ({'model.drop_path_rate': 1.0}, 'model.drop_path_rate=1.0 must be in [0, 1)'),
    ({'model.dropout_rate': -0.1}, 'model.dropout_rate=-0.1 must be in [0, 1)'),
    ({'model.name': 'vgg16', 'model.drop_path_rate': 0.1}, 'stochastic depth is for'),
    ({'model.name': 'resnet18', 'model.dropout_rate': 0.1}, 'dropout is for ViT'),
])
def test_bad_regularisation_keys_are_refused_in_one_line(keys, message):
  config = default.get_config()
  for key, value in keys.items():
    section, name = key.split('.')
    config[section][name] = value
  with pytest.raises(UsageError) as e:
    validation.check_config(config)
  assert message in str(e.value) and '\n' not in str(e.value)
