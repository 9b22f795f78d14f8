"""The moving average of the weights (ema_decay, trainer/optim.py): its
arithmetic, its place in the optimiser state (sharded like the parameters,
checkpointed), evaluation of raw and EMA weights in training, and
--mode=eval of either, also on another mesh."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from cli import validation
from configs import default
from core.errors import UsageError
from tests.helpers import run_main
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import checkpointing
from trainer import optim
from trainer import tree_paths


def test_the_average_follows_the_parameters_after_each_update():
  config = default.get_config()
  config.optimizer, config.momentum, config.weight_decay = 'sgd', 0.0, 0.0
  config.ema_decay = 0.5
  tx = optim.create_optimizer(config, lambda step: 1.0)
  params = {'w': jnp.array([4.0])}
  state = tx.init(params)
  np.testing.assert_array_equal(optim.ema_params(state)['w'], [4.0])  # starts there
  for grad in (2.0, 1.0):  # params 4 -> 2 -> 1
    updates, state = tx.update({'w': jnp.array([grad])}, state, params)
    params = {'w': params['w'] + updates['w']}
  # 0.5 * (0.5 * 4 + 0.5 * 2) + 0.5 * 1
  np.testing.assert_allclose(optim.ema_params(state)['w'], [2.0])
  assert optim.ema_params(tx.init(params)) is not None
  config.ema_decay = 0.0
  assert optim.ema_params(optim.create_optimizer(config, lambda s: 1.0).init(params)) is None


def test_a_run_started_from_other_weights_averages_from_those():
  config = default.get_config()
  config.ema_decay = 0.9
  tx = optim.create_optimizer(config, lambda step: 0.1)
  fresh = {'w': jnp.zeros(3)}
  loaded = {'w': jnp.ones(3)}
  state = optim.with_ema_of(tx.init(fresh), loaded)
  np.testing.assert_array_equal(optim.ema_params(state)['w'], np.ones(3))


@pytest.mark.parametrize('keys, message', [
    ({'eval.weights': 'ema'}, 'keeps no moving average'),
    ({'eval.weights': 'best'}, 'eval.weights'),
    ({'ema_decay': 1.0}, 'ema_decay=1.0 must be in [0, 1)'),
])
def test_bad_ema_keys_are_refused_in_one_line(keys, message):
  config = default.get_config()
  for key, value in keys.items():
    if '.' in key:
      section, name = key.split('.')
      config[section][name] = value
    else:
      config[key] = value
  with pytest.raises(UsageError) as e:
    validation.check_config(config)
  assert message in str(e.value) and '\n' not in str(e.value)


def _records(workdir, split):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [r for r in map(json.loads, f) if r['split'] == split]


def test_training_evaluates_raw_and_ema_weights_and_eval_mode_restores_either(tmp_path):
  """Trained on 8 devices with the update split over them (the average is
  split with the optimiser state), ranked best by the EMA; its average
  evaluated on 2 devices."""
  workdir = str(tmp_path / 'run')
  flags = tiny_synthetic_run_flags(num_train_steps=4, eval_every_steps=2, **{
      'ema_decay': 0.5, 'eval.weights': 'ema', 'mesh.shard_update': 'true',
      'checkpoint.keep_best': 'true'})
  result = run_main(f'--workdir={workdir}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  evals = _records(workdir, 'eval')
  assert [r['step'] for r in evals] == [2, 4]
  assert all(0 <= r['ema_accuracy'] <= 1 and np.isfinite(r['ema_loss']) for r in evals)
  # A decay of 0.5 over a few steps: the average is not the weights.
  assert evals[-1]['ema_loss'] != evals[-1]['loss']

  # The checkpoint holds the average beside the parameters, of their shapes.
  saved = tree_paths.leaves_by_path(ocp.CheckpointManager(
      os.path.join(workdir, checkpointing.LATEST_DIR)).item_metadata(4)['state'])
  params = {k[len('params/'):]: v for k, v in saved.items() if k.startswith('params/')}
  ema = {k.split('/ema/', 1)[1]: v for k, v in saved.items() if '/ema/' in k}
  assert ema.keys() == params.keys()
  assert all(tuple(ema[k].shape) == tuple(params[k].shape) for k in params)

  # (--mode=eval of the raw weights is tested in test_end_to_end.py.)
  result = run_main(f'--workdir={workdir}', '--mode=eval', '--config.mesh.data=2',
                    '--config.mesh.shard_update=false', '--config.eval.weights=ema',
                    '--config.runtime.num_cpu_devices=2', timeout=300,
                    env={'XLA_FLAGS': os.environ['XLA_FLAGS'].replace(
                        'device_count=8', 'device_count=2')})
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['weights'] == 'ema'
  np.testing.assert_allclose(summary['loss'], evals[-1]['ema_loss'], rtol=1e-4)
  assert summary['loss'] != evals[-1]['loss']
