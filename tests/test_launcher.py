"""launch.py: N processes on 127.0.0.1 train as one, stop as one, fail as one.

Two processes through the launcher, as a user runs them: with 4 emulated
devices each, the losses of 1 process with 8 devices and a checkpoint that
one device evaluates; with fewer devices (faster, same mechanisms), stops
before the first step and at one step for both, the launcher's death ending
its processes, time-based saves without a hang, and a failure anywhere
ending the run within a minute, named. The launcher's own mechanics (output,
signals, exit codes) with small stand-ins for main.py.
"""

import ipaddress
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from cli import launcher
from cli import runtime
from tests.helpers import REPO, run_main, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import checkpointing
from trainer import metrics_log

_ENDS_WITHIN_S = 60


class Launched:
  """launch.py (or another command) in the background, its output read as it
  comes, so that no wait can hang on a pipe the process no longer writes."""

  def __init__(self, command, env=None):
    self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
    self._lines = {'stdout': [], 'stderr': []}
    self._readers = [threading.Thread(target=self._read, args=(name,), daemon=True)
                     for name in self._lines]
    for t in self._readers:
      t.start()

  def _read(self, name):
    for line in getattr(self.process, name):
      self._lines[name].append(line.decode(errors='replace'))

  def text(self, name='stdout') -> str:
    return ''.join(self._lines[name])

  def wait_for(self, pattern: str, name='stdout', count=1, timeout=300) -> list[str]:
    """The first `count` matches of `pattern` in the output; fails if the
    process ends or `timeout` passes first."""
    deadline = time.time() + timeout
    while True:
      found = re.findall(pattern, self.text(name), re.MULTILINE)
      if len(found) >= count:
        return found[:count]
      ended = self.process.poll() is not None
      assert not ended and time.time() < deadline, (
          f'no {count} x {pattern!r} ({"ended" if ended else "timed out"}):\n'
          + self.text('stderr')[-3000:] + self.text('stdout')[-3000:])
      time.sleep(0.05)

  def pids(self) -> list[int]:
    """The processes' pids, from the launcher's first lines."""
    return [int(p) for p in self.wait_for(r'launch: process \d is pid (\d+)', 'stderr',
                                          count=2, timeout=60)]

  def finish(self, timeout=300) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) once the process has ended."""
    try:
      self.process.wait(timeout=timeout)
    finally:
      self.process.kill()
    for t in self._readers:
      t.join()
    return self.process.returncode, self.text('stdout'), self.text('stderr')


def launch(*main_args, devices=4, background=False, timeout=600):
  command = [sys.executable, os.path.join(REPO, 'launch.py'), '--processes=2',
             f'--devices={devices}', '--', *main_args]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')  # the launcher sets the device count
  if background:
    return Launched(command, env)
  return subprocess.run(command, cwd=REPO, env=env, text=True, capture_output=True,
                        timeout=timeout)


def _records(workdir, split='train'):
  return [r for r in metrics_log.read(workdir) if r['split'] == split]


def _losses(workdir):
  return {r['step']: r['loss'] for r in _records(workdir)}


def _saved_steps(output: str, process: int) -> list[int]:
  return [int(s) for s in re.findall(rf'\[p{process}\] .*Saving checkpoint (\d+)', output)]


def _wait_for_step(workdir, step, process, timeout=300):
  """Until metrics.jsonl has `step` (for runs far longer than that)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    if os.path.exists(os.path.join(workdir, 'metrics.jsonl')) and any(
        r['step'] >= step for r in _records(workdir)):
      return
    assert process.poll() is None, 'the run ended before step %d' % step
    time.sleep(0.05)
  raise TimeoutError('training made no progress')


def _alive(pid: int) -> bool:
  """Whether `pid` runs (a zombie that nobody reaped has ended)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


def _wait_until_gone(pids, timeout=_ENDS_WITHIN_S) -> None:
  deadline = time.time() + timeout
  while any(_alive(p) for p in pids):
    assert time.time() < deadline, f'still running: {[p for p in pids if _alive(p)]}'
    time.sleep(0.1)


def _listening_addresses(port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
  """The local addresses of this machine's TCP sockets listening on `port`."""
  addresses = []
  for table in ('/proc/net/tcp', '/proc/net/tcp6'):
    with open(table) as f:
      for row in f.readlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        address, hex_port = local.split(':')
        if state != '0A' or int(hex_port, 16) != port:  # 0A: LISTEN
          continue
        # Each 32-bit word in the host's (little-endian) byte order.
        raw = b''.join(bytes.fromhex(address[i:i + 8])[::-1]
                       for i in range(0, len(address), 8))
        ip = ipaddress.ip_address(raw)
        addresses.append(getattr(ip, 'ipv4_mapped', None) or ip)
  return addresses


def test_two_by_four_trains_as_one_by_eight_and_one_device_evaluates_it(tmp_path):
  """...and names process 1, whose host is slowed on purpose, as the one
  that holds the run back (trainer/process_spread.py). A slowed host, not a
  slowed input: the input is read ahead during the step, so a slow one
  holds the run only when it is slower than the step, which on a loaded
  machine can take seconds."""
  flags = tiny_synthetic_run_flags(num_train_steps=4, log_every_steps=1, eval_every_steps=4,
                                   **{'checkpoint.every_steps': 4,
                                      'runtime.agree_every_steps': 1,
                                      'debug.slow_step_s': 1.0, 'debug.slow_process': 1})
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  result = run_main(f'--workdir={single}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  result = launch(f'--workdir={multi}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '[p0] ' in result.stdout and '[p1] ' in result.stdout
  assert 'launch: all 2 processes finished' in result.stderr

  spread = _records(multi, 'processes')
  assert [r['step'] for r in spread] == [1, 2, 3, 4] and not _records(single, 'processes')
  last = spread[-1]  # the first steps' intervals also hold warm-up
  assert (last['slow_process'], last['cause']) == (1, 'compute'), spread
  assert last['own_s'][1] > 0.9 > last['own_s'][0], spread
  assert re.search(r'\[p0\] .*Step 4: process 1 of 2 holds the run back: .* its host '
                   r'computes', result.stdout + result.stderr)
  assert [(r['step'], r['split']) for r in metrics_log.read(multi)
          if r['split'] != 'processes'] == [
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
  """One work dir, stopped four ways, then trained to the end; its losses
  are bitwise those of an uninterrupted run:
    1. SIGTERM before the first step (process 0 waiting for its peer in the
       distributed init, its coordinator listening on loopback only): exit
       75 at once, no checkpoint;
    2. SIGKILL to the launcher while both processes are paused in the
       evaluation of step 4: both get SIGTERM from the kernel, leave the
       pass at the same batch, save step 4 without its eval record and exit;
    3. SIGTERM to one process only: the other stops at the same step (the
       rerun first evaluates step 4);
    4. the rest of the run.
  The runs' lengths differ; the learning rate is constant, so the steps
  compute the same whatever the length.
  """
  flags = lambda steps: tiny_synthetic_run_flags(
      num_train_steps=steps, log_every_steps=1, eval_every_steps=4,
      **{'checkpoint.every_steps': 100, 'runtime.agree_every_steps': 2})
  interrupted = str(tmp_path / 'interrupted')

  # 1. Before the first step: native code (the distributed init) holds the
  # main thread, which no Python signal handler can interrupt.
  port = launcher.free_port()
  alone = Launched(
      [sys.executable, os.path.join(REPO, 'main.py'), f'--workdir={interrupted}', *flags(1000),
       f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2', '--process_id=0'],
      env=dict(os.environ, XLA_FLAGS=xla_flags(1), TF_CPP_MIN_LOG_LEVEL='3'))
  deadline = time.time() + 120
  while not _listening_addresses(port):
    assert alone.process.poll() is None and time.time() < deadline, alone.text('stderr')
    time.sleep(0.05)
  assert all(a.is_loopback for a in _listening_addresses(port))
  alone.process.send_signal(signal.SIGTERM)
  code, _, stderr = alone.finish(timeout=_ENDS_WITHIN_S)
  assert code == 75, stderr[-3000:]
  assert 'stopped by SIGTERM before any step was trained' in stderr.splitlines()[-1]
  assert checkpointing.all_steps(interrupted) == []

  # 2. The launcher killed: its processes save and stop, nobody trains on.
  run = launch(f'--workdir={interrupted}', *flags(1000), '--config.debug.pause_at_step=4',
               devices=1, background=True)
  pids = run.pids()
  run.wait_for(r'^\[p(\d)\] .*Paused at step 4 in its evaluation', count=2)
  run.process.kill()
  _wait_until_gone(pids)
  run.finish()
  assert checkpointing.all_steps(interrupted) == [4]
  assert max(_losses(interrupted)) == 4
  assert _records(interrupted, 'eval') == []

  # 3. SIGTERM to one process only: the other stops at the same step too.
  run = launch(f'--workdir={interrupted}', *flags(1000), '--config.debug.pause_at_step=-1',
               devices=1, background=True)
  pids = run.pids()
  _wait_for_step(interrupted, 6, run.process)
  os.kill(pids[1], signal.SIGTERM)
  code, stdout, stderr = run.finish()
  assert code == 75, stderr[-3000:]
  assert [r['step'] for r in _records(interrupted, 'eval')][:1] == [4]
  stop = max(_losses(interrupted))
  assert stop > 4 and stop % 2 == 0  # an agreement step
  assert _saved_steps(stdout, 0) == _saved_steps(stdout, 1) == [stop]

  # 4. To the end, 2 steps on.
  total = stop + 2
  result = launch(f'--workdir={interrupted}', '--config.debug.pause_at_step=-1',
                  f'--config.num_train_steps={total}', devices=1)
  assert result.returncode == 0, result.stderr[-3000:]

  # Uninterrupted, with a time-based save due at every agreement: both
  # processes save the same steps and the run does not hang.
  straight = str(tmp_path / 'straight')
  result = launch(f'--workdir={straight}', *flags(total),
                  '--config.checkpoint.every_minutes=1e-6', devices=1)
  assert result.returncode == 0, result.stderr[-3000:]
  saved = _saved_steps(result.stdout, 0)
  assert len(saved) > 3 and saved == _saved_steps(result.stdout, 1)
  assert _losses(interrupted) == _losses(straight)  # bitwise: same floats


@pytest.mark.parametrize('victim', [1, 0], ids=['worker', 'coordinator'])
def test_a_killed_process_ends_the_run_within_a_minute_named(tmp_path, victim):
  workdir = str(tmp_path / 'run')
  run = launch(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      num_train_steps=100000, log_every_steps=1), devices=1, background=True)
  pids = run.pids()
  _wait_for_step(workdir, 2, run.process)
  os.kill(pids[victim], signal.SIGKILL)
  killed = time.time()
  code, _, stderr = run.finish()
  assert time.time() - killed < _ENDS_WITHIN_S
  assert code != 0
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
  address = f'127.0.0.1:{launcher.free_port()}'
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


def test_a_loopback_coordinator_binds_to_loopback_only():
  assert runtime.loopback_bind_address('127.0.0.1:1234') == '127.0.0.1:1234'
  assert runtime.loopback_bind_address('localhost:1234') == 'localhost:1234'
  assert runtime.loopback_bind_address('[::1]:1234') == '[::1]:1234'
  # A cluster's coordinator must be reachable from the other hosts.
  assert runtime.loopback_bind_address('10.1.2.3:1234') is None
  assert runtime.loopback_bind_address('node-0:1234') is None


# Two processes join (cli/runtime.py), then each sends itself SIGTERM.
_SIGTERM_AFTER_INIT = """
import os, signal, sys, time
from cli import runtime
received = []
signal.signal(signal.SIGTERM, lambda *_: received.append(1))
runtime.initialize(num_cpu_devices=1, coordinator_address=sys.argv[1], num_processes=2,
                   process_id=int(sys.argv[2]), init_timeout_s=120)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.5)
print('handled' if received else 'lost')
"""


def test_after_the_distributed_init_sigterm_still_reaches_the_trainers_handler():
  """JAX's preemption service, left on, replaces the handler with its own,
  which only takes note: a stop during the rest of the start-up was lost."""
  address = f'127.0.0.1:{launcher.free_port()}'
  env = dict(os.environ, XLA_FLAGS=xla_flags(1), PYTHONPATH=REPO)
  processes = [subprocess.Popen([sys.executable, '-c', _SIGTERM_AFTER_INIT, address, str(i)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
               for i in range(2)]
  for p in processes:
    stdout, stderr = p.communicate(timeout=180)
    assert stdout.split() == ['handled'], stderr[-3000:]


# The launcher's own tests run it with these stand-ins for main.py.

# Process 1 fails (says why, then is slow to exit; or dies of SIGKILL,
# saying nothing), and process 0 fails because of it (once process 1 has
# written argv[1]) half a second later, as a peer's failure is noticed
# (which keeps the cause's line first also when the launcher's readers are
# slow to run on a loaded machine), then exits at once: the exits come in
# the opposite order of the causes.
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
time.sleep(0.5)
if how == 'usage':  # both refuse the same usage; process 1 said it first
  print('error: process 0: the cause', flush=True)
  sys.exit(2)
print('error: process 0: Gloo all-reduce failed: Connection reset by peer', flush=True)
sys.exit(1)
"""

# Runs until SIGTERM, then exits 75 as main.py does after its save; with
# argv[1] == 'p0-dies', process 0 has no handler yet and dies of the signal,
# as main.py does while Python imports its modules; with 'p0-stops-alone',
# process 0 stops at once (75), as after a SIGTERM of its own at start-up.
_STOPPABLE = """
import os, signal, sys, time
first = '--process_id=0' in sys.argv
if first and sys.argv[1] == 'p0-stops-alone':
  sys.exit(75)
if not (first and sys.argv[1] == 'p0-dies'):
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
print('ready', flush=True)
while True:
  time.sleep(0.05)
"""

# Output that is not UTF-8, then more than a pipe holds.
_NOT_UTF8 = """
import sys
sys.stdout.buffer.write(b'\\xff\\xfe not utf-8\\n')
for i in range(5000):
  sys.stdout.buffer.write(b'%d ' % i + b'x' * 60 + b'\\n')
"""


def _stand_in(tmp_path, text: str) -> str:
  script = tmp_path / 'stand_in.py'
  script.write_text(text)
  return str(script)


# launch.py with 2 processes of the script argv[1] instead of main.py.
_LAUNCHER = ('import sys; from cli import launcher; '
             'sys.exit(launcher.run(sys.argv[1], sys.argv[2:], 2, 1))')


def _run_launcher(script: str, *args) -> Launched:
  return Launched([sys.executable, '-c', _LAUNCHER, script, *args])


def _wait_in_thread(run: launcher.Launch, timeout=30):
  """run.wait(), failing (not hanging) if it does not return in time."""
  outcome = []
  waiter = threading.Thread(target=lambda: outcome.append(run.wait()), daemon=True)
  waiter.start()
  waiter.join(timeout)
  if not outcome:
    run.forward(signal.SIGKILL)
    pytest.fail(f'the launcher still waits after {timeout} s')
  return outcome[0]


# The in-process Launch forks this test process, where JAX is imported and
# warns of forks; each child runs only prctl before its exec.
_FORK_WARNING = 'ignore:os.fork:RuntimeWarning'


@pytest.mark.filterwarnings(_FORK_WARNING)
@pytest.mark.parametrize('how', ['error', 'sigkill', 'usage'])
def test_the_cause_is_named_though_a_consequence_exits_first(tmp_path, how):
  run = launcher.Launch(_stand_in(tmp_path, _FAILING_PAIR), [str(tmp_path / 'marker'), how],
                        num_processes=2, devices_per_process=1, out=open(os.devnull, 'w'))
  code, message = _wait_in_thread(run)
  # The cause stopped by the launcher has no code: the run takes the one of
  # the process that failed on its own.
  assert code == (2 if how == 'usage' else 1)
  assert message.startswith('launch: process 1 failed first'), message
  assert ('killed by SIGKILL' in message) if how == 'sigkill' else ('process 1: the cause' in message)


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_output_that_is_not_utf8_is_relayed_and_does_not_stall_the_run(tmp_path):
  out = tmp_path / 'out'
  with open(out, 'wb') as f:
    run = launcher.Launch(_stand_in(tmp_path, _NOT_UTF8), [], num_processes=2,
                          devices_per_process=1, out=f)
    assert _wait_in_thread(run) == (0, 'launch: all 2 processes finished')
  relayed = out.read_bytes()
  assert b'[p0] \xff\xfe not utf-8\n' in relayed and b'[p1] 4999 x' in relayed


def test_sigterm_to_the_launcher_during_start_up_is_a_stop_not_a_failure(tmp_path):
  """Process 0 dies of the SIGTERM the launcher forwarded (before main.py
  could handle it), process 1 stops with 75: the launcher exits 75 and
  blames nobody."""
  run = _run_launcher(_stand_in(tmp_path, _STOPPABLE), 'p0-dies')
  run.pids()
  run.wait_for(r'^\[p\d\] ready', count=2, timeout=60)
  run.process.send_signal(signal.SIGTERM)
  code, _, stderr = run.finish(timeout=60)
  last = stderr.splitlines()[-1]
  assert code == 75, stderr
  assert 'failed' not in last and 'p0 killed by SIGTERM (sent by the launcher)' in last, last


def test_sighup_to_the_launcher_stops_every_process_though_its_terminal_is_gone(tmp_path):
  """An ssh session dropped: the launcher gets SIGHUP and its output goes
  nowhere. It stops its processes as for SIGTERM and still exits 75."""
  out_read, out_write = os.pipe()
  err_read, err_write = os.pipe()
  process = subprocess.Popen(
      [sys.executable, '-c', _LAUNCHER, _stand_in(tmp_path, _STOPPABLE), 'both-stop'],
      cwd=REPO, stdout=out_write, stderr=err_write)
  os.close(out_write)
  os.close(err_write)
  try:
    pids = [int(p) for p in _read_until(err_read, rb'is pid (\d+)', 2)]
    _read_until(out_read, rb'\] ready', 2)
    os.close(out_read)  # every write of the launcher now fails
    os.close(err_read)
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=_ENDS_WITHIN_S) == 75
  finally:
    process.kill()
  _wait_until_gone(pids)


# The launcher, signalled (SIGHUP) while it starts its processes, before
# run() has them: the moment a loaded machine can stretch.
_LAUNCHER_SIGNALLED_WHILE_STARTING = (
    'import os, signal, sys\n'
    'from cli import launcher\n'
    'start = launcher.Launch.__init__\n'
    'def starting(self, *args, **kwargs):\n'
    '  start(self, *args, **kwargs)\n'
    '  os.kill(os.getpid(), signal.SIGHUP)\n'
    'launcher.Launch.__init__ = starting\n'
    'sys.exit(launcher.run(sys.argv[1], sys.argv[2:], 2, 1))')


def test_a_signal_while_the_processes_start_is_forwarded_once_they_exist(tmp_path):
  """Not the launcher alone killed, its processes left running: the signal
  waits until the processes exist, then stops them, and the launcher exits 75."""
  result = subprocess.run(
      [sys.executable, '-c', _LAUNCHER_SIGNALLED_WHILE_STARTING,
       _stand_in(tmp_path, _STOPPABLE), 'both-stop'],
      cwd=REPO, capture_output=True, timeout=_ENDS_WITHIN_S)
  assert result.returncode == 75, result.stderr[-2000:]
  pids = [int(p) for p in re.findall(rb'is pid (\d+)', result.stderr)]
  assert len(pids) == 2
  _wait_until_gone(pids)


def _read_until(fd: int, pattern: bytes, count: int, timeout=60) -> list[bytes]:
  """The first `count` matches of `pattern` in what `fd` gives; fails at its
  end or after `timeout`."""
  data, deadline = b'', time.time() + timeout
  while len(re.findall(pattern, data)) < count:
    ready, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
    chunk = os.read(fd, 65536) if ready else b''
    assert chunk, f'no {count} x {pattern!r} in: {data[-2000:]!r}'
    data += chunk
  return re.findall(pattern, data)[:count]


@pytest.mark.filterwarnings(_FORK_WARNING)
def test_a_process_stopped_alone_at_start_up_makes_the_launcher_stop_the_others(
    tmp_path, monkeypatch):
  monkeypatch.setattr(launcher, '_LONE_STOP_GRACE_S', 0.5)
  run = launcher.Launch(_stand_in(tmp_path, _STOPPABLE), ['p0-stops-alone'],
                        num_processes=2, devices_per_process=1, out=open(os.devnull, 'w'))
  code, message = _wait_in_thread(run)
  assert code == 75, message


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
