"""Optimisers for large batches and fine-tuning (trainer/optim.py): LARS and
LAMB with weight decay and trust ratio skipping biases and norm parameters,
layer-wise learning-rate decay for ViT, and the step schedule; each checked
against the update computed by hand, and LARS and LAMB against themselves
across meshes (their norms are of whole variables, however sharded)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cli import validation
from configs import default
from core.errors import UsageError
from tests.test_train_step import _config, run_steps
from trainer import optim

W = np.array([[3.0, 0.0], [0.0, 4.0]], np.float32)  # |W| = 5
G = np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)
B, GB = np.array([1.0, -1.0], np.float32), np.array([0.5, 0.25], np.float32)


def _tree(kernel, bias):
  return {'layer': {'kernel': jnp.asarray(kernel), 'bias': jnp.asarray(bias)}}


def _first_update(config, lr=0.5):
  tx = optim.create_optimizer(config, lambda step: lr)
  params = _tree(W, B)
  updates, _ = tx.update(_tree(G, GB), tx.init(params), params)
  return jax.tree.map(np.asarray, updates['layer'])


def _optimizer_config(name, **keys):
  config = default.get_config()
  config.optimizer = name
  config.weight_decay = 0.1
  config.momentum = 0.0
  for key, value in keys.items():
    config[key] = value
  return config


def test_lars_scales_kernels_by_the_trust_ratio_and_leaves_biases_plain():
  update = _first_update(_optimizer_config('lars', trust_coefficient=0.01))
  decayed = G + 0.1 * W
  ratio = 0.01 * 5.0 / np.linalg.norm(decayed)
  np.testing.assert_allclose(update['kernel'], -0.5 * ratio * decayed, rtol=1e-6)
  np.testing.assert_allclose(update['bias'], -0.5 * GB, rtol=1e-6)


def test_lamb_scales_kernels_by_the_trust_ratio_and_leaves_biases_plain():
  update = _first_update(_optimizer_config('lamb'))
  # Adam's first step is g / (|g| + eps), element by element.
  adam = lambda g: g / (np.abs(g) + 1e-6)
  kernel = adam(G) + 0.1 * W
  ratio = 5.0 / np.linalg.norm(kernel)
  np.testing.assert_allclose(update['kernel'], -0.5 * ratio * kernel, rtol=1e-5)
  np.testing.assert_allclose(update['bias'], -0.5 * adam(GB), rtol=1e-5)


def test_layer_decay_scales_each_vit_layers_update_from_the_head_down():
  config = _optimizer_config('sgd', weight_decay=0.0, layer_decay=0.5)
  tx = optim.create_optimizer(config, lambda step: 1.0)
  one = jnp.ones((2, 2))
  params = {'embedding': {'kernel': one}, 'pos_embedding': one,
            'encoderblock_0': {'mlp': {'kernel': one}},
            'encoderblock_1': {'mlp': {'kernel': one}},
            'encoder_norm': {'scale': one}, 'head': {'kernel': one}}
  updates, _ = tx.update(params, tx.init(params), params)
  factor = {k: float(-jax.tree.leaves(v)[0][0, 0]) for k, v in updates.items()}
  # depth 2: embeddings 0.5^3, block 0 0.5^2, block 1 0.5, norm and head 1.
  assert factor == {'embedding': 0.125, 'pos_embedding': 0.125, 'encoderblock_0': 0.25,
                    'encoderblock_1': 0.5, 'encoder_norm': 1.0, 'head': 1.0}


def test_the_step_schedule_falls_tenfold_at_30_60_and_80_epochs_after_warm_up():
  config = default.get_config()
  config.batch_size, config.learning_rate = 256, 0.1
  config.lr_schedule, config.warmup_epochs = 'step', 5
  rate = optim.create_learning_rate_fn(config, steps_per_epoch=100, total_steps=9000)
  got = [float(rate(s)) for s in (250, 500, 2999, 3000, 5999, 6000, 7999, 8000)]
  np.testing.assert_allclose(got, [0.05, 0.1, 0.1, 0.01, 0.01, 1e-3, 1e-3, 1e-4],
                             rtol=1e-5)


def test_lars_trains_alike_on_data_parallel_and_fsdp_meshes():
  """The trust ratio's norms are of whole variables, however sharded (LAMB
  takes the same optax.scale_by_trust_ratio)."""
  runs = []
  for mesh in ({'data': 8}, {'data': 2, 'fsdp': 4}):
    config = _config(**mesh)
    config.optimizer, config.learning_rate = 'lars', 2.0
    if 'fsdp' in mesh:
      config.sharding_rules = (('batch', 'data,fsdp'), ('conv_out', 'fsdp'))
    losses, params, _ = run_steps(config, jax.devices(), num_steps=3)
    runs.append((losses, params))
  (losses_dp, params_dp), (losses_fsdp, params_fsdp) = runs
  assert all(np.isfinite(losses_dp)) and losses_dp[-1] < losses_dp[0]
  np.testing.assert_allclose(losses_fsdp, losses_dp, rtol=1e-4)
  for a, b in zip(jax.tree.leaves(params_fsdp), jax.tree.leaves(params_dp)):
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize('keys, message', [
    ({'lr_step_epochs': '60,30'}, 'lr_step_epochs='),
    ({'lr_step_epochs': 'x'}, 'lr_step_epochs='),
    ({'lr_step_epochs': '0,30'}, 'lr_step_epochs='),
    ({'lr_step_steps': '6000,600'}, 'lr_step_steps='),
    ({'lr_step_steps': '1.5'}, 'lr_step_steps='),
    ({'lr_step_steps': '0,10'}, 'lr_step_steps='),
    ({'lr_step_factor': 0.0}, 'lr_step_factor='),
    ({'trust_coefficient': 0.0}, 'trust_coefficient='),
    ({'trust_coefficient': float('nan')}, 'trust_coefficient='),
    ({'layer_decay': 1.5}, 'layer_decay='),
    ({'layer_decay': 0.75}, 'layer-wise decay is for ViT models'),
    ({'optimizer': 'lars', 'engine': 'ps'}, 'set ps.partitioner=round_robin'),
])
def test_bad_large_batch_keys_are_refused_in_one_line(keys, message):
  config = default.get_config()
  for key, value in keys.items():
    config[key] = value
  with pytest.raises(UsageError) as e:
    validation.check_config(config)
  assert message in str(e.value) and '\n' not in str(e.value)


def test_lamb_with_whole_variables_on_ps_shards_is_accepted():
  config = default.get_config()
  config.optimizer, config.engine = 'lamb', 'ps'
  config.ps.partitioner = 'round_robin'
  validation.check_config(config)
