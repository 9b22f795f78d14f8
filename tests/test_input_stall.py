"""A stalled input pipeline is named and stopped (exit 69, nothing new
saved), on every process of a run; a slow but live one is not; a stop during
the wait for input saves and exits 75, and the same command resumes.

debug.stall_after_step=3 makes the training input hand out step 3's batch
and then block (for ever, or debug.stall_for_s): checkpoints every 2 steps
leave checkpoint 2 behind a stall, and a stop during it saves step 3."""

import signal
import time

import pytest

from cli import launcher
from core.errors import EXIT_INPUT_STALLED, EXIT_PREEMPTED
from tests.helpers import run_main, run_main_many, xla_flags
from tests.test_end_to_end import StderrLines, tiny_synthetic_run_flags
from tests.test_launcher import launch
from trainer import checkpointing

_TIMEOUT_S = 4  # data.stall_timeout_s of these runs
# What the exit may take beyond the limit on a loaded machine: the wait's
# slice, the line, the exit (and, for peers, the watcher's polls). Two
# processes on 2 cores beside other jobs took 11 s beyond it; a hang takes
# the wait's whole timeout (120 s or more).
_SLACK_S = 20
# runtime.stop_held_limit_s of the run stopped while every process waits.
_HELD_S = 4
_BLOCKED = 'Input blocked after'
_STALL_LINE = (r'the training input (data.source=synthetic, split train) produced no '
               f'batch for {_TIMEOUT_S} s')


def _flags(**overrides):
  return tiny_synthetic_run_flags(**{
      'checkpoint.every_steps': 2, 'debug.stall_after_step': 3,
      'data.stall_timeout_s': _TIMEOUT_S, **overrides})


def _until_exit(process, stderr, line=_BLOCKED):
  """(exit code, stderr, seconds from `line` to the exit)."""
  stderr.wait_for(line)
  seen = time.monotonic()
  process.wait(timeout=300)
  return process.returncode, stderr.text(), time.monotonic() - seen


def test_a_stalled_input_exits_69_within_its_limit_and_the_last_checkpoint_stands(
    tmp_path):
  workdir = str(tmp_path / 'run')
  process = run_main(f'--workdir={workdir}', *_flags(), background=True)
  code, stderr, took_s = _until_exit(process, StderrLines(process))
  assert code == EXIT_INPUT_STALLED, stderr[-3000:]
  assert _TIMEOUT_S <= took_s < _TIMEOUT_S + _SLACK_S, took_s
  last = stderr.strip().splitlines()[-1]
  assert last.startswith('error: ' + _STALL_LINE) and 'the last checkpoint stands' in last
  assert checkpointing.all_steps(workdir) == [2]


def test_a_slow_but_live_input_does_not_stop_the_run(tmp_path):
  result = run_main(f'--workdir={tmp_path / "run"}',
                    *_flags(**{'debug.stall_for_s': 2, 'data.stall_timeout_s': 8}))
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Input blocked after 3 batches (debug.stall_after_step) for 2 s' in result.stderr
  assert checkpointing.latest_step(str(tmp_path / 'run')) == 8


def test_a_stop_while_waiting_for_input_saves_the_last_step_and_the_rerun_resumes(
    tmp_path):
  # SIGTERM; Ctrl-C's SIGINT has the same handler (coordination/preemption.py).
  sig = signal.SIGTERM
  workdir = str(tmp_path / 'run')
  # Only the signal ends the wait; the input thread blocks ahead of the
  # loop, which waits from moments after its step 3 line.
  flags = _flags(**{'data.stall_timeout_s': 0, 'log_every_steps': 1})
  process = run_main(f'--workdir={workdir}', *flags, background=True)
  stderr = StderrLines(process)
  stderr.wait_for('step 3/8')
  time.sleep(1)
  process.send_signal(sig)
  code, text, took_s = _until_exit(process, stderr, 'step 3/8')
  assert code == EXIT_PREEMPTED and took_s < _SLACK_S, (took_s, text[-3000:])
  assert ('The stop came while the loop waited for the training input '
          '(data.source=synthetic, split train)') in text
  assert 'Stopped at step 3 after saving' in text
  assert checkpointing.all_steps(workdir) == [2, 3]

  result = run_main(f'--workdir={workdir}', *flags)  # the same command
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'from step 3' in result.stderr and _BLOCKED not in result.stderr
  assert checkpointing.latest_step(workdir) == 8


def test_a_stall_on_one_process_ends_every_process_with_69_and_one_line(tmp_path):
  """Two processes started as a cluster starts them (no launcher to kill the
  other): process 1 stalls; process 0, held in the step's collective, learns
  it from the distributed runtime's key-value store."""
  workdir = tmp_path / 'run'
  port = launcher.free_port()
  processes = [run_main(f'--workdir={workdir}', *_flags(**{'debug.stall_process': 1}),
                        f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2',
                        f'--process_id={i}', background=True,
                        env={'XLA_FLAGS': xla_flags(4)}) for i in range(2)]
  try:
    stderrs = [StderrLines(p) for p in processes]
    stderrs[1].wait_for(_BLOCKED)
    seen = time.monotonic()
    for p in processes:
      p.wait(timeout=120)
    took_s = time.monotonic() - seen
  finally:
    for p in processes:
      p.kill()
  texts = [s.text() for s in stderrs]
  assert [p.returncode for p in processes] == [EXIT_INPUT_STALLED] * 2, (
      texts[0][-2000:], texts[1][-2000:])
  assert took_s < _TIMEOUT_S + _SLACK_S, took_s
  assert texts[1].strip().splitlines()[-1].startswith('error: process 1: ' + _STALL_LINE)
  assert texts[0].strip().splitlines()[-1].startswith(
      'error: process 0: on process 1, ' + _STALL_LINE)


def test_launch_reports_a_stall_of_one_process_with_its_code(tmp_path):
  result = launch(f'--workdir={tmp_path / "run"}', *_flags(**{'debug.stall_process': 1}))
  assert result.returncode == EXIT_INPUT_STALLED, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('launch: process ') and _STALL_LINE in last, last


def test_under_launch_a_stop_while_every_process_waits_for_input_exits_75_and_resumes(
    tmp_path):
  """In a run of several processes the wait does not save (a save is a
  collective that a peer held elsewhere would never join): the stop's
  watcher ends each process held out of the loop, nothing new saved."""
  workdir = str(tmp_path / 'run')
  flags = _flags(**{'data.stall_timeout_s': 0, 'runtime.stop_held_limit_s': _HELD_S})
  launched = launch(f'--workdir={workdir}', *flags, background=True)
  launched.wait_for(r'\[p1\] .*' + _BLOCKED)
  launched.wait_for(r'\[p0\] .*' + _BLOCKED)
  launched.process.send_signal(signal.SIGTERM)
  sent = time.monotonic()
  code, stdout, stderr = launched.finish(timeout=120)
  took_s = time.monotonic() - sent
  assert code == EXIT_PREEMPTED, stderr[-3000:] + stdout[-3000:]
  assert _HELD_S <= took_s < _HELD_S + _SLACK_S, took_s
  assert 'nothing new saved, the last checkpoint stands' in stdout
  assert checkpointing.all_steps(workdir) == [2]

  # The input no longer blocks: the run resumes from checkpoint 2 to the end.
  result = launch(f'--workdir={workdir}', *flags, '--config.debug.stall_after_step=-1',
                  timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert checkpointing.latest_step(workdir) == 8


BAD_STALL_KEYS = [
    ('data.stall_timeout_s', '-1'), ('data.stall_timeout_s', 'nan'),
    ('data.stall_timeout_s', 'inf'), ('debug.stall_after_step', '-2'),
    ('debug.stall_for_s', '-0.5'), ('debug.stall_for_s', 'inf'), ('debug.stall_process', '-2'),
    ('runtime.stop_held_limit_s', '0.5'), ('runtime.stop_held_limit_s', 'nan'),
    ('runtime.stop_held_limit_s', 'inf')]


@pytest.fixture(scope='module')
def bad_stall_key_results(tmp_path_factory):
  root = tmp_path_factory.mktemp('bad_stall_keys')
  return run_main_many([[f'--workdir={root / str(n)}', '--config=configs/quickstart.py',
                         f'--config.{key}={value}']
                        for n, (key, value) in enumerate(BAD_STALL_KEYS)])


@pytest.mark.parametrize('number', range(len(BAD_STALL_KEYS)),
                         ids=[f'{k}={v}' for k, v in BAD_STALL_KEYS])
def test_a_bad_stall_key_exits_2_with_one_line_naming_it(bad_stall_key_results, number):
  result, key = bad_stall_key_results[number], BAD_STALL_KEYS[number][0]
  assert result.returncode == 2, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and key in lines[0], result.stderr
