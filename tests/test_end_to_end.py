"""The command line as a user drives it: train, evaluate, resume, Ctrl-C."""

import glob
import json
import os
import re
import shutil
import signal
import threading
import time
import types

import numpy as np
import pytest

from core.errors import EXIT_INPUT_STALLED, EXIT_PREEMPTED
from tests.helpers import run_main, run_main_many
from tests.test_wandb_tracker import wandb_history
from trainer import metrics_log
from trainer import unreadable

STEPS = 8


def tiny_run_flags(shapes_dir, **overrides):
  """A few steps of a 4-wide ResNet-18 at 16 px; eval batch 64 does not divide
  the 600 validation images, so padding and masking are exercised.

  A constant rate and XLA's convolutions keep the compiled programs the same
  whatever the number of steps (a schedule's length is a constant of the
  train step), so most runs of the session load them from the compilation
  cache, and the MFU needs no second trace (trainer/mfu.py). The forms are
  compared in test_conv_forms.py, the schedules in test_train_step.py and
  test_resume.py. The plots at the end (a second of drawing) are left to the
  runs that look at them (trained_workdir).
  """
  flags = {
      'model.width': 4, 'data.image_size': 16, 'batch_size': 64,
      'num_train_steps': STEPS, 'log_every_steps': 2, 'eval_every_steps': 4,
      'checkpoint.every_steps': 4, 'lr_schedule': 'constant', 'warmup_epochs': 0.0,
      'model.conv_form': 'xla', 'metrics.plots_at_end': False,
  }
  if shapes_dir is not None:
    flags['data.dir'] = shapes_dir
  flags.update(overrides)
  return ['--config=configs/quickstart.py'] + [f'--config.{k}={v}' for k, v in flags.items()]


def tiny_synthetic_run_flags(**overrides):
  """tiny_run_flags on synthetic data with the shapes' 10 classes and 600
  validation images: for tests of the run's mechanics (signals, failures,
  processes), which start faster without TensorFlow (only the file-backed
  sources import it) and need no data set on disk."""
  return tiny_run_flags(None, **{'data.source': 'synthetic',
                                 'data.num_synthetic_examples': 600,
                                 'data.num_synthetic_classes': 10, **overrides})


@pytest.fixture(scope='module')
def trained_workdir(tmp_path_factory, shapes_dir):
  workdir = str(tmp_path_factory.mktemp('e2e') / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(shapes_dir),
                    '--config.checkpoint.keep_best=true', '--config.metrics.plots_at_end=true',
                    '--config.metrics.wandb_project=tests', '--config.metrics.wandb_mode=offline')
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


@pytest.fixture
def trained_copy(trained_workdir, tmp_path):
  """A copy of trained_workdir for a test that runs main.py in it (which may
  write there), so that every test sees the shared one as trained."""
  copy = str(tmp_path / 'run')
  shutil.copytree(trained_workdir, copy)
  return copy


def _records(workdir, split):
  return [r for r in metrics_log.read(workdir) if r['split'] == split]


def test_training_writes_config_metrics_checkpoints_and_events(trained_workdir):
  names = set(os.listdir(trained_workdir))
  assert {'config.json', 'metrics.jsonl', 'checkpoints', 'classes.json'} <= names
  assert any(n.startswith('events.out.tfevents') for n in names)
  assert {f'report_{name}.png' for name in ('loss', 'accuracy', 'lr', 'speed', 'goodput')
          } <= names  # metrics.plots_at_end
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


def test_wandb_offline_holds_the_runs_metrics(trained_workdir):
  ids, rows = wandb_history(trained_workdir)
  assert len(ids) == 1
  for split, key in (('train', 'loss'), ('eval', 'accuracy'), ('goodput', 'goodput')):
    logged = [(r['step'], r[key]) for r in _records(trained_workdir, split)]
    sent = [(r['trainer/step'], r[f'{split}/{key}']) for r in rows if f'{split}/{key}' in r]
    assert logged and [s for s, _ in sent] == [s for s, _ in logged], split
    assert [v for _, v in sent] == pytest.approx([v for _, v in logged]), split


def test_tensorboard_reads_the_logged_scalars(trained_workdir):
  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import plugin_event_accumulator
  from tensorboard.util import tensor_util
  # pylint: enable=g-import-not-at-top
  events = plugin_event_accumulator.EventAccumulator(trained_workdir)
  events.Reload()
  assert events.SummaryMetadata('train/loss').plugin_data.plugin_name == 'scalars'
  logged = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
            for e in events.Tensors('train/loss')]
  expected = [(r['step'], r['loss']) for r in _records(trained_workdir, 'train')]
  assert [step for step, _ in logged] == [step for step, _ in expected]
  np.testing.assert_allclose([v for _, v in logged], [v for _, v in expected], rtol=1e-6)
  assert [e.step for e in events.Tensors('eval/accuracy')] == [4, 8]
  goodput = [r['goodput'] for r in _records(trained_workdir, 'goodput')]
  np.testing.assert_allclose([float(tensor_util.make_ndarray(e.tensor_proto))
                              for e in events.Tensors('goodput/goodput')], goodput, rtol=1e-6)


def test_report_mode_draws_the_run_from_its_files(trained_copy):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  result = run_main(f'--workdir={trained_copy}', '--mode=report')
  assert result.returncode == 0, result.stderr[-3000:]
  plots = json.loads(result.stdout.strip().splitlines()[-1])['plots']
  assert [os.path.basename(p) for p in plots] == [
      f'report_{name}.png' for name in ('loss', 'accuracy', 'lr', 'speed', 'goodput')]
  for path in plots:
    with Image.open(path) as image:
      assert image.format == 'PNG' and image.size[0] >= 600
  # The ledger of the training run is what the last picture draws.
  assert len(json.load(open(os.path.join(trained_copy, 'goodput.json')))['attempts']) == 1


def test_report_mode_without_a_logged_step_exits_2_in_one_line(tmp_path, trained_workdir):
  workdir = tmp_path / 'fresh'
  workdir.mkdir()
  shutil.copy(os.path.join(trained_workdir, 'config.json'), workdir)
  result = run_main(f'--workdir={workdir}', '--mode=report')
  assert result.returncode == 2, result.stderr[-3000:]
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert lines[-1].startswith('error: --workdir=') and 'no training record yet' in lines[-1]
  assert sorted(os.listdir(workdir)) == ['config.json']


def test_eval_mode_reproduces_the_final_training_accuracy(trained_copy):
  final = _records(trained_copy, 'eval')[-1]
  result = run_main(f'--workdir={trained_copy}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == STEPS
  assert summary['accuracy'] == final['accuracy']
  assert summary['top5'] == final['top5']
  assert summary['num_examples'] == 600


def test_predict_classifies_a_folder_a_list_and_files_and_skips_the_unreadable(
    trained_copy, shapes_dir, tmp_path):
  """--mode=predict on the validation folder agrees with --mode=eval's top-1
  (the same evaluation view, weights and classes.json), names the class of
  every image, and names and skips an image that does not decode."""
  val = os.path.join(shapes_dir, 'val')
  broken = tmp_path / 'broken.jpg'
  broken.write_bytes(b'not a jpeg')
  some = sorted(os.path.join(val, c, f) for c in sorted(os.listdir(val))[:2]
                for f in sorted(os.listdir(os.path.join(val, c)))[:1])
  listing = tmp_path / 'list.txt'
  listing.write_text('# two images\n' + '\n'.join(some) + '\n\n')
  output = tmp_path / 'predictions.jsonl'
  before = sorted(os.listdir(trained_copy))
  result = run_main(f'--workdir={trained_copy}', '--mode=predict',
                    f'--config.predict.inputs={val},{listing},{broken}',
                    '--config.predict.top_k=3', f'--config.predict.output={output}')
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [json.loads(l) for l in result.stdout.strip().splitlines()]
  assert output.read_text().strip().splitlines() == result.stdout.strip().splitlines()
  assert len(lines) == 600 + 2 and [l['file'] for l in lines[600:]] == some
  assert f'Unreadable image, skipped: {broken}' in result.stderr
  assert sorted(os.listdir(trained_copy)) == before  # nothing written there
  for line in lines:
    probabilities = [c['probability'] for c in line['top_k']]
    assert len(probabilities) == 3 and probabilities == sorted(probabilities, reverse=True)
    assert sum(probabilities) <= 1 + 1e-6
  correct = sum(l['top_k'][0]['name'] == os.path.basename(os.path.dirname(l['file']))
                for l in lines[:600])
  final = _records(trained_copy, 'eval')[-1]
  assert abs(correct / 600 - final['accuracy']) <= 1 / 600


def test_predict_reads_the_number_of_classes_off_a_checkpoint(trained_workdir):
  """Without classes.json (tfds data) the classifier's width says it."""
  from modes import predict  # pylint: disable=g-import-not-at-top
  directory = os.path.join(trained_workdir, 'checkpoints')
  assert predict.saved_num_classes(directory, STEPS) == 10
  assert predict.top_k(np.array([0.1, 0.6, 0.3]), 2, None) == [
      {'class': 1, 'name': None, 'probability': 0.6},
      {'class': 2, 'name': None, 'probability': 0.3}]


def _held_opening_a_fifo(pid: int) -> bool:
  for wchan in glob.glob(f'/proc/{pid}/task/*/wchan'):
    try:
      with open(wchan) as f:
        if f.read().strip() == 'wait_for_partner':
          return True
    except OSError:  # the thread ended
      pass
  return False


@pytest.mark.parametrize('how', ['stall', 'SIGTERM'])
def test_predict_on_an_image_that_never_comes_stops_with_a_line_not_a_hang(
    trained_copy, tmp_path, how):
  """A FIFO stands for a mount that stops answering: reading it blocks in a
  native call. The wait for it stops at data.stall_timeout_s (exit 69), or
  at a SIGTERM (exit 75), and writes nothing."""
  stuck = tmp_path / 'stuck.jpg'
  os.mkfifo(stuck)
  listing = tmp_path / 'list.txt'
  listing.write_text(f'{stuck}\n')
  output = tmp_path / 'predictions.jsonl'
  timeout_s = 3 if how == 'stall' else 0  # 0: only the signal ends the wait
  process = run_main(f'--workdir={trained_copy}', '--mode=predict',
                     f'--config.predict.inputs={listing}', f'--config.predict.output={output}',
                     f'--config.data.stall_timeout_s={timeout_s}', background=True)
  try:
    if how == 'SIGTERM':
      # Opening a FIFO for reading blocks until a writer comes: the signal
      # goes once a thread of predict is held there (wait_for_partner: the
      # kernel's wait in that open). A writer would end the wait at once
      # (the file reads as empty: an unreadable image, not a hang).
      deadline = time.monotonic() + 120
      while not _held_opening_a_fifo(process.pid):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
      process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
  finally:
    process.kill()
  last = stderr.strip().splitlines()[-1]
  if how == 'stall':
    assert process.returncode == EXIT_INPUT_STALLED, stderr[-3000:]
    assert last.startswith('error: the predict input (predict.inputs, 1 image) '
                           'produced no batch for 3 s'), last
  else:
    assert process.returncode == EXIT_PREEMPTED, stderr[-3000:]
    assert last == 'stopped by SIGTERM during prediction (nothing written); rerun the same command'
  assert not output.exists()


def test_eval_mode_restores_a_chosen_checkpoint(trained_copy):
  trained = _records(trained_copy, 'eval')
  result = run_main(f'--workdir={trained_copy}', '--mode=eval',
                    '--config.eval.checkpoint=4')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == 4
  assert summary['accuracy'] == trained[0]['accuracy']


def test_eval_mode_restores_the_best_checkpoint(trained_copy):
  evals = _records(trained_copy, 'eval')
  best = max(evals, key=lambda r: r['accuracy'])  # the first of equals, as saved
  result = run_main(f'--workdir={trained_copy}', '--mode=eval',
                    '--config.eval.checkpoint=best')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == best['step']
  assert summary['accuracy'] == best['accuracy']


def test_eval_mode_evaluates_another_split_of_the_same_classes(trained_copy):
  result = run_main(f'--workdir={trained_copy}', '--mode=eval',
                    '--config.eval.split=train')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['step'] == STEPS
  assert summary['num_examples'] == 5000  # the shapes' training split


# Invocations in a trained work dir that must exit 2 with one line and
# leave it as it was: (name, main.py arguments after --workdir, what the
# last line says). Run together (run_main_many) in one copy of the work dir.
REFUSALS = [
    ('predict without inputs', ['--mode=predict', '--config.predict.inputs='],
     "predict.inputs='' names no image"),
    ('predict a missing file', ['--mode=predict', '--config.predict.inputs=/nonexistent/x.png'],
     '/nonexistent/x.png is not an image file, a folder'),
    ('eval a missing step', ['--mode=eval', '--config.eval.checkpoint=3'],
     'eval.checkpoint=3: no such checkpoint; available: 4, 8'),
    ('eval an unknown choice', ['--mode=eval', '--config.eval.checkpoint=newest'],
     "eval.checkpoint='newest' is not accepted"),
    ('eval step too large, before a batch is read',
     ['--mode=eval', '--config.runtime.device_memory_gib=0.00001'],
     'error: the eval step does not fit: it needs about '),
    ('rerun with another model', None, 'model.width'),
]


@pytest.fixture(scope='module')
def refusals(trained_workdir, shapes_dir, tmp_path_factory):
  """Each REFUSALS case's result, with the work dir's files and metrics'
  size before and after them all."""
  workdir = str(tmp_path_factory.mktemp('refusals') / 'run')
  shutil.copytree(trained_workdir, workdir)
  metrics = os.path.join(workdir, 'metrics.jsonl')
  before = (sorted(os.listdir(workdir)), os.path.getsize(metrics))
  rerun = tiny_run_flags(shapes_dir, **{'model.width': 8})
  results = run_main_many([[f'--workdir={workdir}', *(args or rerun)]
                           for _, args, _ in REFUSALS])
  after = (sorted(os.listdir(workdir)), os.path.getsize(metrics))
  return dict(zip((name for name, _, _ in REFUSALS), results)), before, after


@pytest.mark.parametrize('name, message', [(n, m) for n, _, m in REFUSALS])
def test_refusals_in_a_trained_workdir_exit_2_in_one_line(refusals, name, message):
  result = refusals[0][name]
  assert result.returncode == 2, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: ') and message in last, last
  assert 'Traceback' not in result.stderr


def test_refusals_leave_the_workdir_as_it_was(refusals):
  results, before, after = refusals
  assert after == before
  too_large = results['eval step too large, before a batch is read']
  assert 'runtime.device_memory_gib=1e-05 allows 0.00 GiB per device' in too_large.stderr
  assert 'eval.batch_size' in too_large.stderr and 'Evaluated' not in too_large.stderr


def test_a_run_killed_between_the_best_and_the_latest_copy_resumes_and_keeps_the_best(
    trained_copy):
  # The best copy of step S was written and the latest copy was not: the
  # latest checkpoints stop before S, and the rerun reaches S again.
  best_dir = os.path.join(trained_copy, 'checkpoints_best')
  [best] = os.listdir(best_dir)
  latest_dir = os.path.join(trained_copy, 'checkpoints')
  for step in os.listdir(latest_dir):
    if int(step) >= int(best):
      shutil.rmtree(os.path.join(latest_dir, step))
  result = run_main(f'--workdir={trained_copy}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(os.listdir(latest_dir)) == ['4', '8']
  assert os.listdir(best_dir) == [best]  # the same step evaluates the same


class StderrLines:
  """The lines a background run writes to standard error, as they come."""

  def __init__(self, process):
    self.lines, self._done = [], False
    self._changed = threading.Condition()
    self._reader = threading.Thread(target=self._read, args=(process.stderr,),
                                    daemon=True)
    self._reader.start()

  def _read(self, stream):
    for line in stream:
      with self._changed:
        self.lines.append(line)
        self._changed.notify_all()
    with self._changed:
      self._done = True
      self._changed.notify_all()

  def wait_for(self, fragment: str, timeout: float = 300) -> None:
    """Returns once a line contains `fragment`; fails if the run ends first."""
    seen = lambda: any(fragment in line for line in self.lines)
    with self._changed:
      self._changed.wait_for(lambda: seen() or self._done, timeout)
      assert seen(), f'no line with {fragment!r}:\n' + ''.join(self.lines[-40:])

  def text(self) -> str:
    """Everything, once the process has ended."""
    self._reader.join()
    return ''.join(self.lines)


def _pause_and_signal(workdir, step, sig, *args):
  """Runs until the pause after `step` (debug.pause_at_step), sends `sig`;
  returns the run's standard error. The run then saves and exits 75."""
  process = run_main(f'--workdir={workdir}', *args,
                     f'--config.debug.pause_at_step={step}', background=True)
  stderr = StderrLines(process)
  stderr.wait_for(f'Paused at step {step}')
  process.send_signal(sig)
  process.wait(timeout=300)
  assert process.returncode == 75, stderr.text()[-3000:]
  return stderr.text()


def test_ctrl_c_and_sigterm_save_and_reruns_continue_with_identical_losses(
    trained_workdir, tmp_path, shapes_dir):
  # The run pauses at a chosen step until the signal comes, so the test does
  # not depend on how long a step takes. trained_workdir is the same run
  # uninterrupted.
  interrupted = str(tmp_path / 'interrupted')
  _pause_and_signal(interrupted, 2, signal.SIGINT,  # Ctrl-C
                    *tiny_run_flags(shapes_dir))
  assert os.listdir(os.path.join(interrupted, 'checkpoints')) == ['2']
  assert max(r['step'] for r in _records(interrupted, 'train')) == 2

  # The same command again, no --config: the saved config.json is the base.
  # This time a preemption notice (SIGTERM) stops it.
  _pause_and_signal(interrupted, 6, signal.SIGTERM)
  assert max(map(int, os.listdir(os.path.join(interrupted, 'checkpoints')))) == 6

  result = run_main(f'--workdir={interrupted}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 6' in result.stderr
  losses = lambda w: {r['step']: r['loss'] for r in _records(w, 'train')}
  assert losses(interrupted) == losses(trained_workdir)  # bitwise: same floats


CORRUPT = b'\xff\xd8\xff not an image'


def _three_class_folder(shapes_dir, root):
  """A user's data set with other classes: three of the shapes classes, 20
  training images each (so that every step reads all of them), and one
  unreadable image in each split."""
  classes = sorted(os.listdir(os.path.join(shapes_dir, 'train')))[:3]
  for split, count in (('train', 20), ('val', None)):
    for name in classes:
      source = os.path.join(shapes_dir, split, name)
      os.makedirs(root / split / f'my_{name}')
      for image in sorted(os.listdir(source))[:count]:
        os.symlink(os.path.join(source, image), root / split / f'my_{name}' / image)
    (root / split / f'my_{classes[0]}' / 'broken.jpg').write_bytes(CORRUPT)
  return str(root)


@pytest.fixture(scope='module')
def fine_tuned(trained_workdir, shapes_dir, tmp_path_factory):
  """A run fine-tuned from a copy of trained_workdir."""
  root = tmp_path_factory.mktemp('tune')
  source = str(root / 'source')
  shutil.copytree(trained_workdir, source)
  data = _three_class_folder(shapes_dir, root / 'mine')
  # A schedule, so that a longer resumed run has a rate that jumps.
  flags = tiny_run_flags(data, **{'data.source': 'folder', 'init.from_workdir': source,
                                  'lr_schedule': 'cosine', 'warmup_epochs': 1.0})
  workdir = str(root / 'tuned')
  result = run_main(f'--workdir={workdir}', *flags, '--config.init.reset_head=true')
  assert result.returncode == 0, result.stderr[-3000:]
  return types.SimpleNamespace(workdir=workdir, source=source, data=data,
                               flags=flags, stderr=result.stderr)


def test_fine_tuning_from_a_checkpoint_with_a_new_head_trains(fine_tuned, tmp_path):
  refused = run_main(f'--workdir={tmp_path / "refused"}', *fine_tuned.flags)
  assert refused.returncode == 2
  error = refused.stderr.strip().splitlines()[-1]
  assert 'params/head/' in error and '(10,' in error and 'init.reset_head' in error
  assert not os.path.exists(tmp_path / 'refused')

  assert 'fresh: params/head/bias, params/head/kernel' in fine_tuned.stderr
  evals = _records(fine_tuned.workdir, 'eval')
  assert evals[-1]['num_examples'] == 180  # 3 classes x 60 validation images
  train = _records(fine_tuned.workdir, 'train')
  assert train[-1]['loss'] < train[0]['loss']


def test_unreadable_files_are_counted_and_named_once_over_epochs(fine_tuned):
  # Every step reads every training image, the broken one included.
  assert len(re.findall(r'Skipped \d+ unreadable train example', fine_tuned.stderr)) >= 2
  broken = [os.path.join(fine_tuned.data, split, name, 'broken.jpg')
            for split, name in (('train', _first_class(fine_tuned.data, 'train')),
                                ('val', _first_class(fine_tuned.data, 'val')))]
  assert unreadable.read(fine_tuned.workdir) == sorted(broken)
  assert _records(fine_tuned.workdir, 'train')[-1]['num_unreadable_files'] == 2
  assert all(r['num_unreadable'] == 1 for r in _records(fine_tuned.workdir, 'eval'))


def _first_class(data, split):
  return sorted(os.listdir(os.path.join(data, split)))[0]


def test_resuming_a_fine_tuned_run_needs_no_source_and_warns_of_a_new_schedule(
    fine_tuned, tmp_path):
  # A copy of the fine-tuned run whose source is gone: init.from_workdir
  # still names one, but nothing is there.
  workdir, gone = str(tmp_path / 'tuned'), str(tmp_path / 'deleted_source')
  shutil.copytree(fine_tuned.workdir, workdir)
  flags = [f for f in fine_tuned.flags if not f.startswith('--config.init.from_workdir=')]
  # The same command, two steps longer: the cosine schedule is rebuilt over
  # 10 steps instead of 8.
  result = run_main(f'--workdir={workdir}', *flags, f'--config.init.from_workdir={gone}',
                    '--config.init.reset_head=true', '--config.num_train_steps=10')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 8' in result.stderr
  warning = [l for l in result.stderr.splitlines() if 'rate jumps' in l]
  assert len(warning) == 1 and '(8 -> 10 steps)' in warning[0], result.stderr[-3000:]
  assert 'at step 8 the rate jumps from ' in warning[0]
  assert max(r['step'] for r in _records(workdir, 'train')) == 10
  # The broken images were read again, and are still listed once.
  assert len(unreadable.read(workdir)) == 2
