"""Fine-tuning from published weights transfers (configs/finetune_resnet50.py):
a ResNet trained on five of the shapes classes, exported in timm's layout and
imported with a new head, learns the other five faster than the same recipe
from scratch. So the import carries what pretraining learned, not just
tensors of the right shapes."""

import json
import os

import pytest

from input_pipeline import shapes
from tests.helpers import run_main

# Classes sorted by name: the first five (blue, green and one magenta) for
# pretraining, the other five (magenta, red, yellow) for fine-tuning.
_FIRST, _SECOND = shapes.class_names()[:5], shapes.class_names()[5:]
# The BiT-HyperRule recipe at a tiny scale: ResNet-18 at 8 wide and 32 px (the
# recipe's own ResNet-50 is its width and depth: tests/test_cuda_lowering.py
# lowers it), batch 64; its schedule's shape kept (a warm-up of 2.5% of the
# steps, falls at 30%, 60% and 90%), at 10 times its rate, since 40 steps are
# 1/500 of its 20,000.
_MODEL = {'model.name': 'resnet18', 'model.width': 8, 'data.image_size': 32,
          'batch_size': 64, 'model.conv_form': 'xla', 'metrics.plots_at_end': False}
_STEPS = 40
_FINE_TUNING = {**_MODEL, 'num_train_steps': _STEPS, 'warmup_steps': 1,
                'lr_step_steps': '12,24,36', 'learning_rate': 0.03, 'log_every_steps': 10,
                'eval_every_steps': _STEPS, 'checkpoint.every_steps': _STEPS}


def _flags(config, **values):
  return [f'--config={config}'] + [f'--config.{k}={v}' for k, v in values.items()]


def _subset(shapes_dir, root, classes):
  """A folder data set of `classes` only: links to the shapes' class folders."""
  for split in shapes.SPLITS:
    os.makedirs(os.path.join(root, split))
    for name in classes:
      os.symlink(os.path.join(shapes_dir, split, name), os.path.join(root, split, name))
  return str(root)


def _eval_loss(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  (last,) = [r for r in records if r['split'] == 'eval' and r['step'] == _STEPS]
  return last['loss']


@pytest.fixture(scope='module')
def pretrained(tmp_path_factory, shapes_dir):
  """model.safetensors of a ResNet-18 trained on the first five classes."""
  root = tmp_path_factory.mktemp('transfer')
  workdir = str(root / 'pretrain')
  data = _subset(shapes_dir, root / 'first', _FIRST)
  flags = _flags('configs/quickstart.py', **_MODEL, **{
      'data.source': 'folder', 'data.dir': data, 'num_train_steps': 40,
      'eval_every_steps': 40, 'checkpoint.every_steps': 40, 'log_every_steps': 20})
  result = run_main(f'--workdir={workdir}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  out = str(root / 'timm')
  result = run_main(f'--workdir={workdir}', '--mode=export', *flags,
                    '--config.export.format=timm', f'--config.export.dir={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return os.path.join(out, 'model.safetensors'), _subset(shapes_dir, root / 'second', _SECOND)


def test_fine_tuning_from_exported_weights_beats_the_same_recipe_from_scratch(
    pretrained, tmp_path):
  weights, data = pretrained
  common = _flags('configs/finetune_resnet50.py', **_FINE_TUNING, **{
      'data.source': 'folder', 'data.dir': data, 'data.eval_split': 'val'})
  tuned = run_main(f'--workdir={tmp_path / "tuned"}', *common,
                   f'--config.init.from_weights={weights}')
  assert tuned.returncode == 0, tuned.stderr[-3000:]
  assert 'Read ' in tuned.stderr + tuned.stdout and 'ignored fc.' in tuned.stderr + tuned.stdout
  scratch = run_main(f'--workdir={tmp_path / "scratch"}', *common)
  assert scratch.returncode == 0, scratch.stderr[-3000:]
  tuned_loss, scratch_loss = _eval_loss(tmp_path / 'tuned'), _eval_loss(tmp_path / 'scratch')
  # Five classes: a model that knows nothing scores log(5) = 1.61. In a run
  # here, after 40 steps of pretraining, the fine-tuned model scored 0.77
  # and the one from scratch 1.61.
  assert tuned_loss < 0.75 * scratch_loss, (tuned_loss, scratch_loss)
