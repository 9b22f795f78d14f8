"""The command line as a user drives it: train, evaluate, resume, Ctrl-C."""

import json
import os
import signal
import time

import pytest

from tests.helpers import run_main
from trainer import metrics_log

STEPS = 8


def tiny_run_flags(shapes_dir, **overrides):
  """A few steps of a 4-wide ResNet-18 at 16 px; eval batch 64 does not divide
  the 600 validation images, so padding and masking are exercised."""
  flags = {
      'model.width': 4, 'data.image_size': 16, 'batch_size': 64,
      'num_train_steps': STEPS, 'log_every_steps': 2, 'eval_every_steps': 4,
      'checkpoint.every_steps': 4, 'data.dir': shapes_dir,
  }
  flags.update(overrides)
  return ['--config=configs/quickstart.py'] + [f'--config.{k}={v}' for k, v in flags.items()]


@pytest.fixture(scope='module')
def trained_workdir(tmp_path_factory, shapes_dir):
  workdir = str(tmp_path_factory.mktemp('e2e') / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(shapes_dir),
                    '--config.checkpoint.keep_best=true')
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


def _records(workdir, split):
  return [r for r in metrics_log.read(workdir) if r['split'] == split]


def test_training_writes_config_metrics_checkpoints_and_events(trained_workdir):
  names = set(os.listdir(trained_workdir))
  assert {'config.json', 'metrics.jsonl', 'checkpoints', 'classes.json'} <= names
  assert any(n.startswith('events.out.tfevents') for n in names)
  train = _records(trained_workdir, 'train')
  assert [r['step'] for r in train] == [2, 4, 6, 8]
  for key in ('loss', 'accuracy', 'images_per_sec', 'step_time_s', 'lr'):
    assert key in train[-1]
  evals = _records(trained_workdir, 'eval')
  assert [r['step'] for r in evals] == [4, 8]
  assert all(r['num_examples'] == 600 for r in evals)  # each example once
  assert sorted(os.listdir(os.path.join(trained_workdir, 'checkpoints'))) == ['4', '8']
  best_step = max(evals, key=lambda r: r['accuracy'])['step']  # first of ties
  assert os.listdir(os.path.join(trained_workdir, 'checkpoints_best')) == [str(best_step)]


def test_eval_mode_reproduces_the_final_training_accuracy(trained_workdir):
  final = _records(trained_workdir, 'eval')[-1]
  result = run_main(f'--workdir={trained_workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == STEPS
  assert summary['accuracy'] == final['accuracy']
  assert summary['top5'] == final['top5']
  assert summary['num_examples'] == 600


def test_eval_mode_restores_a_chosen_checkpoint(trained_workdir):
  result = run_main(f'--workdir={trained_workdir}', '--mode=eval',
                    '--config.eval.checkpoint_step=4')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == 4
  assert summary['accuracy'] == _records(trained_workdir, 'eval')[0]['accuracy']


def test_rerun_with_another_model_in_the_same_workdir_is_refused(trained_workdir, shapes_dir):
  before = os.path.getsize(os.path.join(trained_workdir, 'metrics.jsonl'))
  result = run_main(f'--workdir={trained_workdir}',
                    *tiny_run_flags(shapes_dir, **{'model.width': 8}))
  assert result.returncode == 2
  assert 'model.width' in result.stderr
  assert os.path.getsize(os.path.join(trained_workdir, 'metrics.jsonl')) == before


def _wait_for_train_record(workdir, min_step, process, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if any(r['step'] >= min_step for r in _records(workdir, 'train')):
      return
    assert process.poll() is None, process.communicate()[1][-3000:]
    time.sleep(0.05)
  raise TimeoutError('training made no progress')


def _interrupt(workdir, process, after_step, sig):
  """Sends `sig` once training passed `after_step`; returns the step it stopped at."""
  _wait_for_train_record(workdir, after_step, process)
  process.send_signal(sig)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 75, stderr[-3000:]
  return max(r['step'] for r in _records(workdir, 'train'))


def test_ctrl_c_and_sigterm_save_and_reruns_continue_with_identical_losses(
    tmp_path, shapes_dir):
  # Steps take ~30 ms here: enough of them that a signal sent on seeing a
  # step's record still arrives before the run ends.
  flags = dict(num_train_steps=40, log_every_steps=1, eval_every_steps=100,
               **{'checkpoint.every_steps': 100})
  straight = str(tmp_path / 'straight')
  result = run_main(f'--workdir={straight}', *tiny_run_flags(shapes_dir, **flags))
  assert result.returncode == 0, result.stderr[-3000:]

  interrupted = str(tmp_path / 'interrupted')
  process = run_main(f'--workdir={interrupted}', *tiny_run_flags(shapes_dir, **flags),
                     background=True)
  first_stop = _interrupt(interrupted, process, 3, signal.SIGINT)  # Ctrl-C
  assert first_stop < 40
  assert os.listdir(os.path.join(interrupted, 'checkpoints')) == [str(first_stop)]

  # The same command again, no --config: the saved config.json is the base.
  # This time a preemption notice (SIGTERM) stops it.
  process = run_main(f'--workdir={interrupted}', background=True)
  second_stop = _interrupt(interrupted, process, first_stop + 2, signal.SIGTERM)
  assert first_stop < second_stop < 40

  result = run_main(f'--workdir={interrupted}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resuming from step {second_stop}' in result.stderr
  losses = lambda w: {r['step']: r['loss'] for r in _records(w, 'train')}
  assert losses(interrupted) == losses(straight)  # bitwise: same floats


def _three_class_folder(shapes_dir, root):
  """A user's data set with other classes: three of the shapes classes."""
  classes = sorted(os.listdir(os.path.join(shapes_dir, 'train')))[:3]
  for split in ('train', 'val'):
    os.makedirs(root / split)
    for name in classes:
      os.symlink(os.path.join(shapes_dir, split, name), root / split / f'my_{name}')
  return str(root)


def test_fine_tuning_from_a_checkpoint_with_a_new_head_trains(
    trained_workdir, shapes_dir, tmp_path):
  data = _three_class_folder(shapes_dir, tmp_path / 'mine')
  flags = tiny_run_flags(data, **{'data.source': 'folder',
                                  'init.from_workdir': trained_workdir})
  refused = run_main(f'--workdir={tmp_path / "refused"}', *flags)
  assert refused.returncode == 2
  error = refused.stderr.strip().splitlines()[-1]
  assert 'params/head/' in error and '(10,' in error and 'init.reset_head' in error
  assert not os.path.exists(tmp_path / 'refused')

  workdir = str(tmp_path / 'tuned')
  result = run_main(f'--workdir={workdir}', *flags, '--config.init.reset_head=true')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'fresh: params/head/bias, params/head/kernel' in result.stderr
  evals = _records(workdir, 'eval')
  assert evals[-1]['num_examples'] == 180  # 3 classes x 60 validation images
  train = _records(workdir, 'train')
  assert train[-1]['loss'] < train[0]['loss']
