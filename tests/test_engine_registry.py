"""Engines are found through one registry and own their config checks: a
toy engine added with one REGISTRY line trains, and validation reaches every
engine's checks and every choice key."""

import os
import subprocess
import sys

import pytest

from cli import validation
from configs import default
from core.errors import UsageError
from tests import toy_engine
from tests.helpers import REPO
from trainer import checkpointing
from trainer import engines
from trainer import train


def _tiny_config(engine: str):
  config = default.get_config()
  config.engine = engine
  config.model.name, config.model.width = 'resnet18', 4
  config.data.update(dict(source='synthetic', image_size=16, augment='none',
                          num_synthetic_examples=16, num_synthetic_classes=4))
  config.batch_size = config.eval.batch_size = 8
  config.num_train_steps = 2
  config.eval_every_steps = 0
  return config


def test_an_engine_added_by_one_registry_line_trains(tmp_path, monkeypatch):
  monkeypatch.setitem(engines.REGISTRY, 'toy', 'tests.toy_engine')
  toy_engine.STEPS_TAKEN.clear()
  config = _tiny_config('toy')
  validation.check_config(config)  # 'toy' is accepted, its own check runs
  config.grad_accum_steps = 2
  with pytest.raises(UsageError, match='engine=toy takes grad_accum_steps=1'):
    validation.check_config(config)
  config.grad_accum_steps = 1
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  assert len(toy_engine.STEPS_TAKEN) == 2
  assert checkpointing.latest_step(workdir) == 2
  assert os.path.isdir(workdir)
  assert 'toy' not in engines.emulated_names()


def test_the_engines_exports_are_complete():
  for name in engines.names():
    package = engines.package(name)
    for export in ('create', 'CONFIG_SECTIONS', 'EMULATED', 'check_section',
                   'check_config', 'check_against_devices'):
      assert hasattr(package, export), (name, export)
    if package.EMULATED:
      assert callable(package.host_timer), name


@pytest.mark.parametrize('key', ['engine', 'nonfinite', 'optimizer', 'ps.mode',
                                 'ps.partitioner', 'allreduce.algorithm'])
def test_every_choice_key_refuses_an_unknown_value(key):
  config = default.get_config()
  section, _, name = key.rpartition('.')
  (config[section] if section else config)[name] = 'bogus'
  with pytest.raises(UsageError, match=f"{key}='bogus' is not accepted"):
    validation.check_config(config)


def test_an_engines_own_checks_run_only_when_it_is_configured():
  config = default.get_config()
  config.mesh.fsdp, config.mesh.data = 2, -1
  validation.check_config(config)  # SPMD shards over fsdp
  config.engine = 'allreduce'
  with pytest.raises(UsageError, match='engine=allreduce emulates data parallelism only'):
    validation.check_config(config)


def test_validation_and_the_engines_packages_touch_no_device():
  """jax.distributed.initialize must come before anything starts a backend;
  validation (cli/validation.py, with every owner's check it calls: the
  planner's planner/checks.py among them) and each mode's own checks run
  before it, and validation imports every engine's package."""
  code = ('import jax._src.xla_bridge as xb\n'
          'from configs import default\n'
          'from cli import validation\n'
          'from trainer import engines\n'
          'validation.check_config(default.get_config())\n'
          'for name in engines.names(): engines.package(name)\n'
          'from cli import modes\n'
          'config = default.get_config()\n'
          'config.plan.target = "here"\n'
          'for check in modes.MODE_CHECKS.values(): check(config, 1)\n'
          'assert not xb._backends, "a backend started"\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                          text=True, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
