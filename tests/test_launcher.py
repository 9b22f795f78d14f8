"""launch.py: N processes on 127.0.0.1 train as one, stop as one, fail as one.

Two processes through the launcher, as a user runs them: with 4 emulated
devices each, the losses of 1 process with 8 devices and a checkpoint that
one device evaluates; with fewer devices (faster, same mechanisms),
preemption at one step for both, time-based saves without a hang, and a
failure anywhere ending the run within a minute, named.
"""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import REPO, run_main, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import metrics_log

_ENDS_WITHIN_S = 60


def launch(*main_args, devices=4, background=False, timeout=600):
  command = [sys.executable, os.path.join(REPO, 'launch.py'), '--processes=2',
             f'--devices={devices}', '--', *main_args]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')  # the launcher sets the device count
  if background:
    return subprocess.Popen(command, cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  return subprocess.run(command, cwd=REPO, env=env, text=True, capture_output=True,
                        timeout=timeout)


def _records(workdir, split='train'):
  return [r for r in metrics_log.read(workdir) if r['split'] == split]


def _losses(workdir):
  return {r['step']: r['loss'] for r in _records(workdir)}


def _saved_steps(output: str, process: int) -> list[int]:
  return [int(s) for s in re.findall(rf'\[p{process}\] .*Saving checkpoint (\d+)', output)]


def _wait_for_step(workdir, step, process, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and any(
        r['step'] >= step for r in _records(workdir)):
      return
    assert process.poll() is None, process.communicate()[1][-3000:]
    time.sleep(0.05)
  raise TimeoutError('training made no progress')


def _pids(process) -> list[int]:
  """The processes' pids, from the launcher's first stderr lines."""
  pids = []
  while len(pids) < 2:
    line = process.stderr.readline()
    match = re.search(r'launch: process (\d) is pid (\d+)', line)
    if match:
      pids.append(int(match.group(2)))
  return pids


def test_two_by_four_trains_as_one_by_eight_and_one_device_evaluates_it(tmp_path):
  flags = tiny_synthetic_run_flags(num_train_steps=4, log_every_steps=1, eval_every_steps=4,
                                   **{'checkpoint.every_steps': 4})
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  result = run_main(f'--workdir={single}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  result = launch(f'--workdir={multi}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '[p0] ' in result.stdout and '[p1] ' in result.stdout
  assert 'launch: all 2 processes finished' in result.stderr

  assert [(r['step'], r['split']) for r in metrics_log.read(multi)] == [
      (r['step'], r['split']) for r in metrics_log.read(single)]
  # Equal up to the summation order of the cross-process all-reduce (gloo).
  np.testing.assert_allclose(list(_losses(multi).values()),
                             list(_losses(single).values()), rtol=1e-5)
  trained = _records(multi, 'eval')[-1]
  assert trained['num_examples'] == 600

  # The checkpoint of 2 processes x 4 devices, on 1 process with 1 device.
  result = run_main(f'--workdir={multi}', '--mode=eval',
                    env={'XLA_FLAGS': xla_flags(1)})
  assert result.returncode == 0, result.stderr[-3000:]
  summary = eval(result.stdout.strip().splitlines()[-1].replace('null', 'None'))  # pylint: disable=eval-used
  assert summary['num_examples'] == 600
  assert summary['accuracy'] == pytest.approx(trained['accuracy'], abs=1e-6)


def test_preemption_stops_both_processes_at_one_step_and_resumes_bitwise(tmp_path):
  flags = tiny_synthetic_run_flags(
      num_train_steps=20, log_every_steps=1, eval_every_steps=100,
      **{'checkpoint.every_steps': 100, 'runtime.agree_every_steps': 2})
  # Uninterrupted, with a time-based save due at every agreement: both
  # processes save the same steps and the run does not hang.
  straight = str(tmp_path / 'straight')
  result = launch(f'--workdir={straight}', *flags, '--config.checkpoint.every_minutes=1e-6',
                  devices=1)
  assert result.returncode == 0, result.stderr[-3000:]
  saved = _saved_steps(result.stdout, 0)
  assert len(saved) > 3 and saved == _saved_steps(result.stdout, 1)

  # SIGTERM to the launcher: both save one step and exit 75.
  interrupted = str(tmp_path / 'interrupted')
  process = launch(f'--workdir={interrupted}', *flags, devices=1, background=True)
  _wait_for_step(interrupted, 4, process)
  process.send_signal(signal.SIGTERM)
  stdout, stderr = process.communicate(timeout=300)
  assert process.returncode == 75, stderr[-3000:]
  first_stop = max(_losses(interrupted))
  assert first_stop < 20 and first_stop % 2 == 0  # an agreement step
  assert _saved_steps(stdout, 0) == _saved_steps(stdout, 1) == [first_stop]

  # SIGTERM to one process only: the other stops at the same step too.
  process = launch(f'--workdir={interrupted}', devices=1, background=True)
  pids = _pids(process)
  _wait_for_step(interrupted, first_stop + 2, process)
  os.kill(pids[1], signal.SIGTERM)
  stdout, stderr = process.communicate(timeout=300)
  assert process.returncode == 75, stderr[-3000:]
  second_stop = max(_losses(interrupted))
  assert first_stop < second_stop < 20
  assert _saved_steps(stdout, 0) == _saved_steps(stdout, 1) == [second_stop]

  result = launch(f'--workdir={interrupted}', devices=1)
  assert result.returncode == 0, result.stderr[-3000:]
  assert _losses(interrupted) == _losses(straight)  # bitwise: same floats


@pytest.mark.parametrize('victim', [1, 0], ids=['worker', 'coordinator'])
def test_a_killed_process_ends_the_run_within_a_minute_named(tmp_path, victim):
  workdir = str(tmp_path / 'run')
  process = launch(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      num_train_steps=100000, log_every_steps=1), devices=1, background=True)
  pids = _pids(process)
  _wait_for_step(workdir, 2, process)
  os.kill(pids[victim], signal.SIGKILL)
  killed = time.time()
  _, stderr = process.communicate(timeout=300)
  assert time.time() - killed < _ENDS_WITHIN_S
  assert process.returncode != 0
  assert f'process {victim} failed first (killed by SIGKILL)' in stderr.splitlines()[-1]


def test_an_error_on_one_process_ends_the_run_within_a_minute_with_its_message(
    tmp_path):
  start = time.time()
  result = launch(f'--workdir={tmp_path / "run"}', *tiny_synthetic_run_flags(
      num_train_steps=100000, log_every_steps=1,
      **{'debug.fail_at_step': 3, 'debug.fail_process': 1}), devices=1)
  assert result.returncode == 1
  last = result.stderr.splitlines()[-1]
  assert 'process 1 failed first' in last and 'debug.fail_at_step=3' in last, last
  assert time.time() - start < 300  # start-up and compile, then the failure


def test_without_the_launcher_a_dead_process_ends_the_others(tmp_path):
  """A cluster starts processes itself: JAX's heartbeat ends the survivors."""
  workdir = str(tmp_path / 'run')
  flags = tiny_synthetic_run_flags(num_train_steps=100000, log_every_steps=1,
                                   **{'runtime.heartbeat_timeout_s': 10})
  from cli.launcher import free_port  # pylint: disable=g-import-not-at-top
  address = f'127.0.0.1:{free_port()}'
  processes = [run_main(f'--workdir={workdir}', *flags, f'--coordinator_address={address}',
                        '--num_processes=2', f'--process_id={i}', background=True,
                        env={'XLA_FLAGS': xla_flags(1)})
               for i in range(2)]
  _wait_for_step(workdir, 2, processes[0])
  processes[1].kill()
  killed = time.time()
  processes[0].communicate(timeout=300)
  assert time.time() - killed < _ENDS_WITHIN_S
  assert processes[0].returncode != 0


# Stands in for main.py in the launcher's own tests: process 1 fails (says
# why, then is slow to exit; or dies of SIGKILL, saying nothing), and
# process 0 fails because of it (once process 1 has written argv[1]), then
# exits at once: the exits come in the opposite order of the causes.
_FAILING_PAIR = """
import os, signal, sys, time
marker, how = sys.argv[1], sys.argv[2]
if '--process_id=1' in sys.argv:
  if how == 'sigkill':
    open(marker, 'w').close()
    os.kill(os.getpid(), signal.SIGKILL)
  print('error: process 1: the cause', flush=True)
  open(marker, 'w').close()
  time.sleep(3)
  sys.exit(1)
while not os.path.exists(marker):
  time.sleep(0.01)
print('error: process 0: Gloo all-reduce failed: Connection reset by peer', flush=True)
sys.exit(1)
"""


@pytest.mark.parametrize('how', ['error', 'sigkill'])
def test_the_cause_is_named_though_a_consequence_exits_first(tmp_path, how):
  from cli import launcher  # pylint: disable=g-import-not-at-top
  script = tmp_path / 'pair.py'
  script.write_text(_FAILING_PAIR)
  run = launcher.Launch(str(script), [str(tmp_path / 'marker'), how], num_processes=2,
                        devices_per_process=1, out=open(os.devnull, 'w'))
  code, message = run.wait()
  assert code == 1
  assert message.startswith('launch: process 1 failed first'), message
  assert ('the cause' in message) if how == 'error' else ('killed by SIGKILL' in message)


@pytest.mark.parametrize('args,fragment', [
    (['--processes=0', '--', '--workdir=w'], '--processes=0'),
    (['--processes=2'], 'after --'),
    (['--', '--config=configs/quickstart.py'], '--workdir'),
    (['--', '--workdir=w', '--process_id=1'], 'the launcher sets it'),
], ids=['no processes', 'no main args', 'no workdir', 'coordinator flag'])
def test_bad_launcher_input_exits_2_with_one_line(args, fragment):
  result = subprocess.run([sys.executable, os.path.join(REPO, 'launch.py'), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
  assert result.returncode == 2
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1 and fragment in lines[0], result.stderr
