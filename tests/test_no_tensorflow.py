"""--mode=bench and training on synthetic data run where TensorFlow is absent.

A GPU machine may have jax, flax, optax and orbax but neither tensorflow nor
tensorflow_datasets (scripts/gpu_bundle.sh prepares a run for one). Here a
sitecustomize on PYTHONPATH marks both as absent in every main.py process:
`import tensorflow` raises ModuleNotFoundError and importlib.util.find_spec
returns None, as on a machine that lacks them.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import run_main, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags

_ABSENT = ('tensorflow', 'tensorflow_datasets')
_SITECUSTOMIZE = ''.join(
    f'sys.modules[{name!r}] = None\n' for name in _ABSENT)  # None: "not found"


@pytest.fixture
def no_tensorflow_env(tmp_path):
  (tmp_path / 'sitecustomize.py').write_text('import sys\n' + _SITECUSTOMIZE)
  return {'PYTHONPATH': str(tmp_path)}


@pytest.mark.parametrize('module', _ABSENT)
def test_the_environment_hides_tensorflow(no_tensorflow_env, module):
  env = {**os.environ, **no_tensorflow_env}
  result = subprocess.run([sys.executable, '-c', f'import {module}'], env=env,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode != 0
  assert 'ModuleNotFoundError' in result.stderr


def test_bench_on_synthetic_data_runs_without_tensorflow(tmp_path, no_tensorflow_env):
  # On 2 devices: the bench's matmul peak, timed on every device, took a
  # quarter of the run's CPU on 8 (tests/test_bench.py).
  result = run_main(
      '--mode=bench', f'--workdir={tmp_path / "bench"}',
      '--config.model.name=resnet18', '--config.model.width=8',
      '--config.data.image_size=32', '--config.batch_size=8',
      '--config.bench.steps=2', '--config.bench.warmup_steps=1',
      '--config.data.source=synthetic',
      env={**no_tensorflow_env, 'XLA_FLAGS': xla_flags(2)})
  assert result.returncode == 0, result.stderr[-3000:]
  record = json.loads(result.stdout.strip().splitlines()[-1])
  assert record['model'] == 'resnet18' and record['images_per_sec'] > 0
  assert record['dtype'] == 'float32'  # model.dtype=auto on CPU


def test_training_on_synthetic_data_runs_without_tensorflow(tmp_path, no_tensorflow_env):
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(),
                    env=no_tensorflow_env)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(workdir / 'metrics.jsonl') as f:
    records = [json.loads(line) for line in f]
  assert any(r['split'] == 'eval' for r in records)
  assert os.listdir(workdir / 'checkpoints')
