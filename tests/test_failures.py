"""Failures mid-run: non-finite losses, SIGKILL at any moment, a full disk,
a stop in the middle of an evaluation, a stop during start-up, a second
Ctrl-C while a save hangs."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cli import launcher
from cli import runtime
from coordination import workdir_lock
from tests.helpers import REPO, run_main, xla_flags
from tests.test_end_to_end import StderrLines, tiny_synthetic_run_flags
from tests.test_launcher import _listening_addresses
from trainer import checkpointing
from trainer import goodput
from trainer import metrics_log

# A bound on the time from a signal to the exit that holds on a loaded
# machine; what the code guarantees is far less (docs/reliability.md).
_PROMPT_EXIT_S = 10


@pytest.fixture(scope='module')
def stopped_at_nan(tmp_path_factory):
  """A run stopped by a NaN loss at step 6, with checkpoints 2 and 4. Step 6
  is saved but not logged (every 4 steps): the check before the save finds it."""
  workdir = str(tmp_path_factory.mktemp('nan') / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      **{'debug.nan_at_step': 5, 'checkpoint.every_steps': 2, 'log_every_steps': 4}))
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
  logged = max(r['step'] for r in _train_records(workdir))  # what the killed run trained
  complete = sorted(int(n) for n in _checkpoint_names(workdir) if n.isdigit())
  assert complete and complete[-1] in (2, 4), _checkpoint_names(workdir)

  # 2. What a save cut short leaves behind, for certain: a later step's
  # temporary folder, holding part of a checkpoint.
  partial = os.path.join(workdir, 'checkpoints', '8.orbax-checkpoint-tmp-1')
  shutil.copytree(os.path.join(workdir, 'checkpoints', str(complete[-1])), partial)
  shutil.rmtree(os.path.join(partial, 'state'))

  # 3. Rerun to the end: it resumes from the latest complete checkpoint.
  began = time.time()
  result = run_main(f'--workdir={workdir}', '--config.debug.pause_at_step=-1')
  measured_s = time.time() - began
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resuming from step {complete[-1]}' in result.stderr
  assert '10' in _checkpoint_names(workdir)

  # 4. The goodput ledger (trainer/goodput.py): the steps after the complete
  # checkpoint that the killed run trained (to 5, as its metrics said) are
  # the rerun's redone steps, charged to the killed attempt; each attempt's
  # parts add up to its wall time, and the rerun's to what was measured here.
  killed, rerun = goodput.read(workdir)
  assert killed['reached_step'] == logged == 5
  assert killed['redone_steps'] == 5 - complete[-1] and killed['parts']['lost_work'] > 0
  assert rerun['first_step'] == complete[-1] and rerun['reached_step'] == 10
  for attempt in (killed, rerun):
    assert sum(attempt['parts'].values()) == pytest.approx(attempt['wall_s'], rel=1e-9)
  # The ledger ends at its last write; the interpreter's exit follows it.
  assert 0 < measured_s - rerun['wall_s'] < max(0.02 * measured_s, 2.0), (
      measured_s, rerun['wall_s'])
  assert rerun['parts']['other'] < 0.1 * rerun['wall_s'], rerun['parts']
  assert (f'over 2 attempts ({5 - complete[-1]} steps redone)' in result.stderr and
          'Run time: goodput ' in result.stderr), result.stderr[-2000:]
  goodput_records = [r for r in metrics_log.read(workdir) if r['split'] == 'goodput']
  assert goodput_records[-1]['redone_steps'] == 5 - complete[-1]


def _train_records(workdir):
  return [r for r in metrics_log.read(workdir) if r['split'] == 'train']


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


def test_disk_full_during_a_save_keeps_the_last_checkpoint_and_the_same_command_resumes(
    stopped_at_nan, tmp_path):
  # A file-size limit (ulimit -f) fails writes as a full disk does (EFBIG
  # instead of ENOSPC, the same path in train.py), without privileges: 32 KiB
  # lets the run write its logs and metrics, but not a checkpoint's files
  # (about 70 KiB and more).
  workdir = str(tmp_path / 'run')
  shutil.copytree(stopped_at_nan[0], workdir)  # checkpoints 2 and 4
  command = ['main.py', f'--workdir={workdir}', '--config.debug.nan_at_step=-1']
  env = dict(os.environ, XLA_FLAGS=xla_flags(8),
             TF_CPP_MIN_LOG_LEVEL='3')
  result = subprocess.run(
      [sys.executable, '-c', _LIMIT_FILE_SIZE, str(32 * 1024), *command],
      cwd=REPO, env=env, text=True, capture_output=True, timeout=600)

  assert result.returncode == 1, result.stderr[-3000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'file size limit' in error and 'step 4' in error and 'intact' in error, error
  assert '(File too large)' in error and 'ulimit -f' in error
  assert checkpointing.all_steps(workdir) == [2, 4]  # the failed save is none

  # Space freed (the limit gone): the same command resumes from the last
  # complete checkpoint, never the save cut short, and trains to the end.
  result = subprocess.run([sys.executable, *command], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 4' in result.stderr
  assert checkpointing.all_steps(workdir) == [4, 6, 8]  # checkpoint.keep=3
  assert max(r['step'] for r in metrics_log.read(workdir) if r['split'] == 'train') == 8
  assert _eval_steps(workdir)[-1] == 8


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
  assert code == 75 and took_s < _PROMPT_EXIT_S, (took_s, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == (
      'stopped by SIGTERM during the evaluation of step 4 (nothing written); '
      'rerun the same command')
  assert open(os.path.join(workdir, 'metrics.jsonl'), encoding='utf-8').read() == before
  assert checkpointing.best_steps(workdir) == []

  # 3. The same command: step 4 is evaluated before training goes on, and
  # this time the final evaluation (step 8) is stopped.
  began = time.time()
  code, stderr, _ = _signal_when(run_main(f'--workdir={workdir}',
                                          '--config.debug.pause_at_step=8',
                                          background=True), paused_in_eval(8))
  stopped_s = time.time() - began
  assert code == 75, stderr[-3000:]
  records = [(r['step'], r['split']) for r in metrics_log.read(workdir)]
  assert records.index((4, 'eval')) < records.index((6, 'train'))
  assert _eval_steps(workdir) == [4]
  assert checkpointing.all_steps(workdir) == [4, 8]
  assert checkpointing.best_steps(workdir) == [4]  # a result, so a candidate

  # 4. A rerun that finds the last step saved evaluates it, once, and ends.
  began = time.time()
  result = run_main(f'--workdir={workdir}', '--config.debug.pause_at_step=-1')
  rerun_s = time.time() - began
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Evaluating step 8 again' in result.stderr
  assert _eval_steps(workdir) == [4, 8]

  # 5. The goodput ledger of the three training attempts (--mode=eval keeps
  # none): a stop saves the step it stops at, so no step is redone; each
  # attempt's parts add up to its wall time, and the last two attempts' to
  # the time measured around them here (their exit follows the last write).
  attempts = goodput.read(workdir)
  assert [(a['first_step'], a['reached_step'], a['redone_steps']) for a in attempts] == [
      (0, 4, 0), (4, 8, 0), (8, 8, 0)]
  for attempt in attempts:
    assert sum(attempt['parts'].values()) == pytest.approx(attempt['wall_s'], rel=1e-9)
    assert attempt['parts']['lost_work'] == 0
  for attempt, measured_s in zip(attempts[1:], (stopped_s, rerun_s)):
    assert 0 < measured_s - attempt['wall_s'] < max(0.02 * measured_s, 2.0), (
        measured_s, attempt['wall_s'])


def test_ctrl_c_during_start_up_exits_75_promptly_though_native_code_holds_the_process(
    tmp_path):
  """Start-up's worst case: the main thread held in native code, where no
  Python handler runs; here the distributed init of process 0 of 2, waiting
  for a peer that never comes. A watcher thread ends the process 2 s after
  the signal (coordination/preemption.py)."""
  workdir = tmp_path / 'run'
  port = launcher.free_port()
  process = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(),
                     f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2',
                     '--process_id=0', background=True, env={'XLA_FLAGS': xla_flags(1)})
  try:
    deadline = time.monotonic() + 120
    while not _listening_addresses(port):  # in the init: its coordinator is up
      assert process.poll() is None, process.communicate()[1][-3000:]
      assert time.monotonic() < deadline, 'the distributed init never started'
      time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    took_s = time.monotonic() - sent
  finally:
    process.kill()
  assert process.returncode == 75 and took_s < _PROMPT_EXIT_S, (took_s, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == (
      'stopped by SIGINT before any step was trained (nothing to save); '
      'rerun the same command')
  assert not os.path.exists(workdir / 'checkpoints')
  assert not os.path.exists(workdir / workdir_lock.LOCK_FILE_NAME)


# Runs main.py (argv[2:]) with the commit of checkpoint argv[1] held for an
# hour, as on a disk that stopped answering: orbax writes a checkpoint into
# a temporary folder and commits it by renaming that folder to the step.
_HOLD_THE_COMMIT = """
import asyncio, os, runpy, sys
from orbax.checkpoint._src.path import async_path
step, rename = sys.argv[1], async_path.rename
async def held(source, target):
  if target.name == step:
    os.write(2, f'Holding the commit of checkpoint {step}\\n'.encode())
    await asyncio.sleep(3600)
  return await rename(source, target)
async_path.rename = held
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_a_second_ctrl_c_aborts_a_save_that_hangs_and_the_same_command_resumes(
    tmp_path):
  workdir = str(tmp_path / 'run')
  flags = tiny_synthetic_run_flags(num_train_steps=6, log_every_steps=1,
                                   eval_every_steps=100, **{'checkpoint.every_steps': 2})
  # GLIBC_TUNABLES set as main.py would, so that it does not restart itself.
  env = dict(os.environ, XLA_FLAGS=xla_flags(8), TF_CPP_MIN_LOG_LEVEL='3',
             GLIBC_TUNABLES=runtime.MALLOC_TUNABLES)
  process = subprocess.Popen(
      [sys.executable, '-c', _HOLD_THE_COMMIT, '3', 'main.py', f'--workdir={workdir}',
       *flags, '--config.debug.pause_at_step=3'],
      cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  stderr = StderrLines(process)
  try:
    # 1. Ctrl-C: the run saves step 3 (after step 2's save), whose commit hangs.
    stderr.wait_for('Paused at step 3')
    process.send_signal(signal.SIGINT)
    stderr.wait_for('Holding the commit of checkpoint 3')
    # 2. Ctrl-C again: out at once, though the save never ends.
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    process.wait(timeout=60)
    took_s = time.monotonic() - sent
  finally:
    process.kill()
  assert process.returncode == 130 and took_s < _PROMPT_EXIT_S, (
      took_s, stderr.text()[-3000:])
  assert stderr.text().strip().splitlines()[-1] == (
      'aborted by Ctrl-C without saving; the last complete checkpoint (step 2) is '
      'intact: rerun the same command to resume')
  assert checkpointing.all_steps(workdir) == [2]  # step 3's save is none
  assert not os.path.exists(os.path.join(workdir, workdir_lock.LOCK_FILE_NAME))

  # 3. The same command resumes from step 2 and trains to the end; the lock
  # was released, not left to be taken over.
  result = run_main(f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming from step 2' in result.stderr
  assert 'its process is gone' not in result.stderr
  assert checkpointing.all_steps(workdir) == [2, 4, 6]
  assert _eval_steps(workdir) == [6]
