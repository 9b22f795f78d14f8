"""Failures mid-run: non-finite losses, SIGKILL at any moment, a full disk,
a stop in the middle of an evaluation."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, run_main, xla_flags
from tests.test_end_to_end import StderrLines, tiny_synthetic_run_flags
from trainer import checkpointing
from trainer import metrics_log


@pytest.fixture(scope='module')
def stopped_at_nan(tmp_path_factory):
  """A run stopped by a NaN loss at step 6, with checkpoints 2 and 4."""
  workdir = str(tmp_path_factory.mktemp('nan') / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      **{'debug.nan_at_step': 5, 'checkpoint.every_steps': 2, 'log_every_steps': 1}))
  return workdir, result


def test_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(stopped_at_nan):
  workdir, result = stopped_at_nan
  assert result.returncode == 1, result.stderr[-3000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'non-finite at step 6' in error  # the 6th step (step index 5)
  assert 'last good checkpoint: step 4' in error
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']

  # The kept checkpoint is complete: evaluation restores it.
  result = run_main(f'--workdir={workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]


def test_nonfinite_loss_with_skip_drops_that_update_and_trains_on(tmp_path):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      nonfinite='skip', **{'debug.nan_at_step': 5, 'log_every_steps': 1}))
  assert result.returncode == 0, result.stderr[-3000:]
  train = {r['step']: r for r in metrics_log.read(workdir) if r['split'] == 'train'}
  assert train[6]['nonfinite_steps'] == 1
  assert all(train[s]['nonfinite_steps'] == 0 for s in train if s != 6)
  assert isinstance(train[8]['loss'], float)  # finite again after the skip


def _checkpoint_names(workdir):
  path = os.path.join(workdir, 'checkpoints')
  return os.listdir(path) if os.path.isdir(path) else []


def test_sigkill_during_and_between_saves_always_resumes_from_a_complete_checkpoint(
    tmp_path):
  workdir = str(tmp_path / 'run')
  flags = tiny_synthetic_run_flags(num_train_steps=10, log_every_steps=1,
                                   **{'checkpoint.every_steps': 2})

  # 1. Kill it paused after step 5: the save of step 4 (started a step
  # earlier, in the background) may be complete or still in orbax's
  # temporary folder. Either is a moment SIGKILL may strike.
  process = run_main(f'--workdir={workdir}', *flags,
                     '--config.debug.pause_at_step=5', background=True)
  StderrLines(process).wait_for('Paused at step 5')
  process.kill()  # SIGKILL: no handler runs, nothing is flushed
  process.wait()
  complete = sorted(int(n) for n in _checkpoint_names(workdir) if n.isdigit())
  assert complete and complete[-1] in (2, 4), _checkpoint_names(workdir)

  # 2. What a save cut short leaves behind, for certain: a later step's
  # temporary folder, holding part of a checkpoint.
  partial = os.path.join(workdir, 'checkpoints', '8.orbax-checkpoint-tmp-1')
  shutil.copytree(os.path.join(workdir, 'checkpoints', str(complete[-1])), partial)
  shutil.rmtree(os.path.join(partial, 'state'))

  # 3. Rerun to the end: it resumes from the latest complete checkpoint.
  result = run_main(f'--workdir={workdir}', '--config.debug.pause_at_step=-1')
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resuming from step {complete[-1]}' in result.stderr
  assert '10' in _checkpoint_names(workdir)


# Runs the rest of its command line with files limited to argv[1] bytes: a
# write past it fails with EFBIG (SIGXFSZ, which would kill the process
# instead, ignored). A launcher rather than preexec_fn, which is unsafe in a
# process with threads (JAX's).
_LIMIT_FILE_SIZE = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable] + sys.argv[2:])
"""


def test_disk_full_during_a_save_keeps_the_previous_checkpoint_loadable(
    stopped_at_nan, tmp_path):
  # A file-size limit (ulimit -f) fails writes as a full disk does (EFBIG
  # instead of ENOSPC, the same path in train.py), without privileges: 32 KiB
  # lets the run write its logs and metrics, but not a checkpoint's files
  # (about 70 KiB and more).
  workdir = str(tmp_path / 'run')
  shutil.copytree(stopped_at_nan[0], workdir)  # checkpoints 2 and 4
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             TF_CPP_MIN_LOG_LEVEL='3')
  result = subprocess.run(
      [sys.executable, '-c', _LIMIT_FILE_SIZE, str(32 * 1024), 'main.py',
       f'--workdir={workdir}', '--config.debug.nan_at_step=-1'],
      cwd=REPO, env=env, text=True, capture_output=True, timeout=600)

  assert result.returncode == 1, result.stderr[-3000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'file size limit' in error and 'step 4' in error and 'intact' in error, error
  assert '(File too large)' in error and 'ulimit -f' in error

  result = run_main(f'--workdir={workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.loads(result.stdout.strip().splitlines()[-1])['step'] == 4


def test_a_full_disk_is_recognised_in_oserrors_and_in_tensorstore_messages():
  # The end-to-end test above meets EFBIG; a real full disk gives ENOSPC,
  # which tensorstore reports in its message only.
  tensorstore = ValueError('Error writing "d/1a2b": [OS error 28: No space left on device]')
  assert checkpointing.disk_full_cause(RuntimeError('save failed')) is None
  wrapped = RuntimeError('save failed')
  wrapped.__cause__ = tensorstore
  assert checkpointing.disk_full_cause(wrapped) == 'No space left on device'
  assert checkpointing.disk_full_cause(OSError(errno.EDQUOT, 'Disk quota exceeded')) == (
      'Disk quota exceeded')


def _eval_steps(workdir):
  return [r['step'] for r in metrics_log.read(workdir) if r['split'] == 'eval']


def _signal_when(process, line, sig=signal.SIGTERM):
  """Sends `sig` once the run has logged `line`; (exit code, stderr,
  seconds from the signal to the exit)."""
  stderr = StderrLines(process)
  stderr.wait_for(line)
  process.send_signal(sig)
  sent = time.monotonic()
  process.wait(timeout=300)
  return process.returncode, stderr.text(), time.monotonic() - sent


def test_sigterm_during_an_evaluation_saves_that_step_and_the_rerun_evaluates_it_first(
    tmp_path):
  # 10 eval batches of 64 at steps 4 and 8; the pause (debug.pause_at_step)
  # holds the evaluation after its first batch until the signal comes.
  workdir = str(tmp_path / 'run')
  flags = tiny_synthetic_run_flags(**{'checkpoint.keep_best': 'true',
                                      'checkpoint.every_steps': 100})
  paused_in_eval = lambda step: f'Paused at step {step} in its evaluation, after batch 1'

  # 1. Stopped in the evaluation of step 4: saved at 4, exit 75, no result
  # of the partial pass (no eval record, no best checkpoint).
  code, stderr, _ = _signal_when(run_main(f'--workdir={workdir}', *flags,
                                          '--config.debug.pause_at_step=4',
                                          background=True), paused_in_eval(4))
  assert code == 75, stderr[-3000:]
  assert 'Evaluation stopped after batch 1/10' in stderr
  assert checkpointing.all_steps(workdir) == [4]
  assert _eval_steps(workdir) == [] and checkpointing.best_steps(workdir) == []
  before = open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8').read()

  # 2. --mode=eval of it, stopped mid-pass: exit 75 at once, nothing written.
  code, stderr, took_s = _signal_when(
      run_main(f'--workdir={workdir}', '--mode=eval', '--config.debug.pause_at_step=4',
               background=True), paused_in_eval(4))
  assert code == 75 and took_s < 30, (took_s, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == (
      'stopped by SIGTERM during the evaluation of step 4 (nothing written); '
      'rerun the same command')
  assert open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8').read() == before
  assert checkpointing.best_steps(workdir) == []

  # 3. The same command: step 4 is evaluated before training goes on, and
  # this time the final evaluation (step 8) is stopped.
  code, stderr, _ = _signal_when(run_main(f'--workdir={workdir}',
                                          '--config.debug.pause_at_step=8',
                                          background=True), paused_in_eval(8))
  assert code == 75, stderr[-3000:]
  records = [(r['step'], r['split']) for r in metrics_log.read(workdir)]
  assert records.index((4, 'eval')) < records.index((6, 'train'))
  assert _eval_steps(workdir) == [4]
  assert checkpointing.all_steps(workdir) == [4, 8]
  assert checkpointing.best_steps(workdir) == [4]  # a result, so a candidate

  # 4. A rerun that finds the last step saved evaluates it, once, and ends.
  result = run_main(f'--workdir={workdir}', '--config.debug.pause_at_step=-1')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Evaluating step 8 again' in result.stderr
  assert _eval_steps(workdir) == [4, 8]
