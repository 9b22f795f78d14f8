"""The recipes that follow a paper (configs/paper.py): each sets every value
of its paper's table, says so in its docstring, has the paper's schedule,
and trains a few steps at a tiny width with its own optimiser, schedule and
batch-norm groups."""

import tempfile

import flax.linen as nn
import jax
import numpy as np
import pytest

from cli import describe
from cli import validation
from configs import finetune_resnet50, finetune_vit_b16, imagenet_resnet50, imagenet_resnet50_lars
from configs import imagenet_vit_b16, paper
from configs.schema import dotted_items
from core.errors import UsageError
from models import registry
from models import resnet
from trainer import experiment
from trainer import optim
from trainer import specs
from trainer import state as state_lib
from trainer.engines import spmd

RECIPES = {'goyal': imagenet_resnet50, 'mlperf_lars': imagenet_resnet50_lars,
           'deit_b': imagenet_vit_b16}
# Recipes that start from published weights: their tables and schedules are
# checked here; their steps are those of the recipes above (SGD, cosine).
FINE_TUNING = {'vit_jax_ft': finetune_vit_b16, 'bit_ft': finetune_resnet50}
IMAGENET_TRAIN = 1_281_167
DEVICES = 8


@pytest.mark.parametrize('name', list(RECIPES) + list(FINE_TUNING))
def test_the_recipe_sets_every_value_of_its_papers_table(name):
  recipe = {**RECIPES, **FINE_TUNING}[name]
  config = recipe.get_config()
  validation.check_config(config)
  values = dotted_items(config)
  for key, (value, _) in recipe.PAPER.settings.items():
    assert values[key] == value, (key, values[key], value)


@pytest.mark.parametrize('name', list(RECIPES) + list(FINE_TUNING))
def test_the_docstring_states_the_table_and_the_list_shows_the_recipe(name):
  recipe = {**RECIPES, **FINE_TUNING}[name]
  assert recipe.__doc__.endswith(paper.describe(recipe.PAPER))
  for key, (value, _) in recipe.PAPER.settings.items():
    assert f'{key} = {value!r}' in recipe.__doc__
  assert f'{recipe.PAPER.top1}%' in recipe.__doc__
  path = f'configs/{recipe.__name__.split(".")[-1]}.py'
  assert (path, recipe.__doc__.split('\n')[0]) in describe.recipes()


def test_a_setting_that_is_not_a_key_of_the_schema_is_refused():
  table = paper.Paper(source='-', settings={'model.widht': (8, '-')}, batch_size=1,
                      top1=0.0, top1_where='-')
  with pytest.raises(KeyError, match='model.widht'):
    paper.apply(imagenet_resnet50.get_config(), table)


def _rates(config, steps, batch_size=None):
  if batch_size:
    config.batch_size = batch_size
  steps_per_epoch = IMAGENET_TRAIN // config.batch_size
  total = int(np.ceil(config.num_epochs * steps_per_epoch))
  rate = optim.create_learning_rate_fn(config, steps_per_epoch, total)
  return steps_per_epoch, total, [float(rate(s)) for s in steps(steps_per_epoch, total)]


def test_goyal_warms_up_for_5_epochs_then_falls_tenfold_at_30_60_and_80():
  # Batch 1024: 1,251 steps an epoch, peak 0.1 * 1024 / 256 = 0.4.
  at = lambda e, _: [int(round(x * e)) for x in (2.5, 5, 29.99, 30, 59.99, 60, 79.99, 80, 89.9)]
  _, _, got = _rates(imagenet_resnet50.get_config(), at)
  np.testing.assert_allclose(got, [0.2, 0.4, 0.4, 0.04, 0.04, 4e-3, 4e-3, 4e-4, 4e-4],
                             rtol=1e-3)


@pytest.mark.parametrize('name, rate', [
    ('goyal', 3.2),  # section 5.2: kn = 8k, a reference rate of 3.2
    ('mlperf_lars', 10.0),  # --base_learning_rate=10.0 at batch 4096
    ('deit_b', 1e-3),  # Table 9: 0.0005 x 1024 / 512
])
def test_at_the_sources_batch_the_rate_peaks_where_the_source_says(name, rate):
  recipe = RECIPES[name]
  _, _, got = _rates(recipe.get_config(), lambda e, _: [5 * e],
                     batch_size=recipe.PAPER.batch_size)
  np.testing.assert_allclose(got, [rate], rtol=1e-6)


def test_vit_fine_tuning_warms_up_for_500_steps_to_0_03_then_decays_as_a_cosine():
  config = finetune_vit_b16.get_config()
  rate = optim.create_learning_rate_fn(config, IMAGENET_TRAIN // 512, config.num_train_steps)
  got = [float(rate(s)) for s in (0, 250, 500, 500 + 19_500 // 2, 20_000)]
  np.testing.assert_allclose(got, [0.0, 0.015, 0.03, 0.015, 0.0], rtol=1e-4, atol=1e-9)
  assert config.init.reset_head and not config.init.from_weights  # the user names the file


def test_resnet_fine_tuning_follows_bit_hyperrules_staircase():
  # bit_hyperrule.get_lr for ImageNet: 0.003 * step / 500 in the warm-up,
  # then 0.003 divided by 10 after each of 6,000, 12,000 and 18,000 (the
  # recipe's falls come one step earlier, at the steps themselves).
  config = finetune_resnet50.get_config()
  rate = optim.create_learning_rate_fn(config, IMAGENET_TRAIN // 512, config.num_train_steps)
  steps = (0, 100, 499, 500, 5999, 6001, 11_999, 12_001, 17_999, 18_001, 19_999)
  want = (0.0, 6e-4, 0.002994, 3e-3, 3e-3, 3e-4, 3e-4, 3e-5, 3e-5, 3e-6, 3e-6)
  np.testing.assert_allclose([float(rate(s)) for s in steps], want, rtol=1e-4, atol=1e-12)
  assert config.init.reset_head and not config.init.from_weights  # the user names the file


def test_mlperf_lars_warms_up_to_10_then_decays_as_the_square_to_0():
  steps_per_epoch, total, got = _rates(
      imagenet_resnet50_lars.get_config(),
      lambda e, t: [int(2.5 * e), 5 * e, 5 * e + (t - 5 * e) // 2, t - 1, t])
  warmup = 5 * steps_per_epoch
  assert (steps_per_epoch, total) == (312, 13104)
  half = 10.0 * (1 - ((total - warmup) // 2) / (total - warmup)) ** 2  # 2.5
  last = 10.0 * (1 / (total - warmup)) ** 2
  np.testing.assert_allclose(got, [10.0 * int(2.5 * steps_per_epoch) / warmup, 10.0, half,
                                   last, 0.0], rtol=1e-4, atol=1e-9)
  assert abs(half - 2.5) < 1e-3


def _tiny(recipe):
  """The recipe at a tiny width and 32 px on synthetic data, one batch-norm
  group a device (the batch the groups allow), 3 steps. The ResNet recipes
  train ResNet-18: the optimiser, schedule, loss and batch-norm groups are
  the recipe's, and its compile is a third of ResNet-50's (which
  tests/test_cuda_lowering.py lowers for both recipes)."""
  config = recipe.get_config()
  config.data.source, config.data.augment = 'synthetic', 'none'
  config.data.image_size = 32
  config.data.num_synthetic_classes = 10
  is_vit = registry.is_vit(config.model.name)
  config.model.width, config.model.depth = (64, 1) if is_vit else (8, 0)
  if not is_vit:
    config.model.name = 'resnet18'
  config.batch_size = DEVICES * max(config.model.bn_group_size, 2)
  config.data.num_synthetic_examples = config.batch_size
  config.num_train_steps = 3
  validation.check_config(config)
  return config


_FIRST_STATE = {}  # model name -> the host copy of the first initial state built for it


def _initial_state(exp):
  """The state a tiny run starts from. Both ResNet recipes start from the
  same variables (batch-norm groups change none), so the second copies the
  first's and initialises only its own optimiser state: one compile of the
  model's initialisers less."""
  name = exp.config.model.name
  if name not in _FIRST_STATE:
    state = state_lib.create_train_state(exp.model, exp.tx, exp.config.data.image_size,
                                         exp.state_shardings, seed=0)
    _FIRST_STATE[name] = jax.device_get(state)  # the step donates the device copy
    return state
  first = _FIRST_STATE[name]
  params = jax.device_put(first.params, exp.state_shardings.params)
  return first.replace(
      step=jax.device_put(first.step, exp.state_shardings.step), params=params,
      batch_stats=jax.device_put(first.batch_stats, exp.state_shardings.batch_stats),
      opt_state=jax.jit(exp.tx.init, out_shardings=exp.state_shardings.opt_state)(params))


@pytest.fixture(scope='module', params=list(RECIPES))
def tiny_run(request):
  """(config, losses, learning rates, state before, state after) of 3 steps
  on one repeated batch."""
  config = _tiny(RECIPES[request.param])
  with tempfile.TemporaryDirectory() as workdir:
    exp = experiment.build_experiment(config, workdir)
  state = _initial_state(exp)
  before = jax.device_get(state)
  batch = jax.device_put(specs.random_batch(config.batch_size, config.data.image_size,
                                            np.random.default_rng(0), num_classes=10),
                         exp.batch_sharding)
  step = spmd.jit_train_step(exp)
  losses, rates = [], []
  with exp.tracing_context():
    for _ in range(config.num_train_steps):
      state, metrics = step(state, batch)
      losses.append(float(metrics['loss']))
      rates.append(float(metrics['lr']))
  return config, losses, rates, before, jax.device_get(state)


def test_a_few_steps_of_the_recipe_train_under_its_warm_up(tiny_run):
  config, losses, rates, before, after = tiny_run
  assert all(np.isfinite(losses)), losses
  # Warm-up over all 3 steps (5 epochs of one step each, cut to the run).
  peak = optim.peak_learning_rate(config)
  np.testing.assert_allclose(rates, [0.0, peak / 3, 2 * peak / 3], rtol=1e-5)
  moved = [not np.array_equal(a, b) for a, b in
           zip(jax.tree.leaves(before.params), jax.tree.leaves(after.params))]
  assert all(moved), f'{moved.count(False)} of {len(moved)} parameters did not move'
  if config.model.bn_group_size:
    stats = zip(jax.tree.leaves(before.batch_stats), jax.tree.leaves(after.batch_stats))
    assert all(not np.array_equal(a, b) for a, b in stats)


@pytest.mark.parametrize('block, last', [(resnet.BasicBlock, 'BatchNorm_1'),
                                         (resnet.Bottleneck, 'BatchNorm_2')])
def test_every_resnet_block_starts_with_its_last_batch_norm_scale_at_zero(block, last):
  # Goyal et al. section 5.1 (models/resnet.py): each residual branch starts
  # silent, its block the identity; the other scales start at 1.
  x = np.ones((2, 4, 4, 8), np.float32)
  params = nn.meta.unbox(block(filters=8).init(jax.random.key(0), x, train=False))['params']
  norms = sorted(name for name in params if 'BatchNorm' in name)
  assert norms[-1] == last
  assert not np.asarray(params[last]['scale']).any()
  for name in norms[:-1]:
    assert (np.asarray(params[name]['scale']) == 1).all(), name


@pytest.mark.parametrize('power', [0.0, -2.0, float('nan'), float('inf')])
def test_a_poly_power_that_is_not_a_finite_positive_number_is_refused_in_one_line(power):
  config = imagenet_resnet50_lars.get_config()
  config.lr_poly_power = power
  with pytest.raises(UsageError) as e:
    validation.check_config(config)
  assert 'lr_poly_power=' in str(e.value) and '\n' not in str(e.value)
