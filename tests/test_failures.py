"""Failures mid-run: non-finite losses, SIGKILL at any moment, a full disk."""

import errno
import json
import os
import subprocess
import time

import pytest

from tests.helpers import run_main
from tests.test_end_to_end import tiny_run_flags
from trainer import metrics_log


def test_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, shapes_dir):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(
      shapes_dir, **{'debug.nan_at_step': 5, 'checkpoint.every_steps': 2,
                     'log_every_steps': 1}))
  assert result.returncode == 1, result.stderr[-3000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'non-finite at step 6' in error  # the 6th step (step index 5)
  assert 'last good checkpoint: step 4' in error
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']

  # The kept checkpoint is complete: evaluation restores it.
  result = run_main(f'--workdir={workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]


def test_nonfinite_loss_with_skip_drops_that_update_and_trains_on(tmp_path, shapes_dir):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(
      shapes_dir, nonfinite='skip', **{'debug.nan_at_step': 5, 'log_every_steps': 1}))
  assert result.returncode == 0, result.stderr[-3000:]
  train = {r['step']: r for r in metrics_log.read(workdir) if r['split'] == 'train'}
  assert train[6]['nonfinite_steps'] == 1
  assert all(train[s]['nonfinite_steps'] == 0 for s in train if s != 6)
  assert isinstance(train[8]['loss'], float)  # finite again after the skip


def _checkpoint_names(workdir):
  path = os.path.join(workdir, 'checkpoints')
  return os.listdir(path) if os.path.isdir(path) else []


def _kill_when(process, condition, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if condition():
      process.kill()  # SIGKILL: no handler runs, nothing is flushed
      process.communicate()
      return
    assert process.poll() is None, process.communicate()[1][-3000:]
    time.sleep(0.05)
  raise TimeoutError('the condition never held')


def test_sigkill_during_and_between_saves_always_resumes_from_a_complete_checkpoint(
    tmp_path, shapes_dir):
  workdir = str(tmp_path / 'run')
  # 40 steps of ~30 ms: room for the kill between saves before the run ends.
  flags = tiny_run_flags(shapes_dir, num_train_steps=40, log_every_steps=1,
                         **{'checkpoint.every_steps': 2})

  # 1. In the middle of the first save: orbax's temporary folder exists.
  process = run_main(f'--workdir={workdir}', *flags, background=True)
  _kill_when(process, lambda: any('tmp' in n for n in _checkpoint_names(workdir)))
  assert any('tmp' in n for n in _checkpoint_names(workdir)), 'killed after the save'

  # 2. Rerun; kill it between saves, after it trained past step 5.
  process = run_main(f'--workdir={workdir}', background=True)
  _kill_when(process, lambda: any(
      r['step'] >= 5 for r in metrics_log.read(workdir) if r['split'] == 'train'))

  # 3. Rerun to the end: it resumes from the latest complete checkpoint.
  complete = sorted(int(n) for n in _checkpoint_names(workdir) if n.isdigit())
  result = run_main(f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resuming from step {complete[-1]}' in result.stderr
  assert '40' in _checkpoint_names(workdir)


@pytest.fixture
def small_filesystem(tmp_path):
  """An 8 MB tmpfs: a real full disk, which permissions cannot fake for root."""
  mount_point = tmp_path / 'small'
  mount_point.mkdir()
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=8m', 'tmpfs',
                            str(mount_point)], capture_output=True)
  if mounted.returncode:
    pytest.skip(f'cannot mount a tmpfs here: {mounted.stderr.strip()!r}')
  yield mount_point
  subprocess.run(['umount', str(mount_point)], check=True)


def _fill(directory):
  """Fills the file system, which the run may already have done itself."""
  try:
    with open(os.path.join(directory, 'filler'), 'wb') as f:
      while True:
        f.write(b'\0' * 65536)
        f.flush()
  except OSError as e:
    assert e.errno == errno.ENOSPC, e


def test_disk_full_during_a_save_keeps_the_previous_checkpoint_loadable(
    small_filesystem, shapes_dir):
  workdir = str(small_filesystem / 'run')
  process = run_main(f'--workdir={workdir}', *tiny_run_flags(
      shapes_dir, num_train_steps=40, log_every_steps=1,
      **{'checkpoint.every_steps': 2}), background=True)
  deadline = time.time() + 300
  while not os.path.isdir(os.path.join(workdir, 'checkpoints', '2')):
    assert process.poll() is None and time.time() < deadline, process.communicate()[1][-9000:]
    time.sleep(0.05)
  _fill(small_filesystem)
  _, stderr = process.communicate(timeout=300)

  assert process.returncode == 1, stderr[-3000:]
  error = stderr.strip().splitlines()[-1]
  assert 'disk full' in error and 'step 2' in error and 'intact' in error

  os.remove(small_filesystem / 'filler')
  result = run_main(f'--workdir={workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.loads(result.stdout.strip().splitlines()[-1])['step'] == 2
