"""Runs one main.py command as N processes on this machine (launch.py).

Each process gets M emulated CPU devices (or the host's accelerators, with
--devices=0), the coordinator flags of a multi-process run on 127.0.0.1,
and the same arguments. The launcher:
  - prefixes every output line with the process index ("[p1] ..."),
    relaying bytes as they come: a child's output need not be UTF-8, and a
    relay that stopped reading would leave that child blocked on a full pipe
    while the others wait for it. If the launcher's own output is gone (an
    ssh session dropped), the relays go on reading and drop what they read;
  - forwards SIGINT and SIGTERM to every process, once per signal it gets,
    and SIGHUP as SIGTERM, so a preempted run (or one whose terminal went
    away) saves at one step and exits 75 as one process does (the processes
    run in their own session: a terminal's Ctrl-C or hang-up reaches them
    only through the launcher, and so only once);
  - ties each process's life to its own (Linux): if the launcher dies,
    even of SIGKILL, the kernel sends every process SIGTERM, and they save
    and stop instead of training on unwatched beside a rerun;
  - when a process fails, kills the others at once (they could only wait
    for it in a collective) and exits with the first failure's code, naming
    the process and its last error line. "First" is the process whose
    `error:` line came first: a failure makes the others' collectives fail
    within milliseconds, so two processes can exit within one poll, and
    the order of the exits does not tell the cause from the consequence.
    A process that dies of a signal the launcher forwarded did not fail: it
    was stopped, before it could save, and resumes from its last checkpoint;
  - when one process stopped (75) and another still runs _LONE_STOP_GRACE_S
    later, stops that one too: a process stopped alone during start-up (a
    signal to it alone) leaves the others waiting for it. A stop agreed in
    the loop ends every process within moments of the others.
Exit code: 0 when every process succeeded, 75 when every process stopped
(after a clean save, or on a signal the launcher forwarded), else the first
failure's.
"""

import collections
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from core.errors import EXIT_FAILURE, EXIT_PREEMPTED

_POLL_S = 0.1
_TAIL_LINES = 20
_LONE_STOP_GRACE_S = 10.0
# What the launcher forwards, for each signal it handles.
FORWARDED = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
             signal.SIGHUP: signal.SIGTERM}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def with_cpu_devices(xla_flags: str, num_devices: int) -> str:
  """`xla_flags` with its emulated CPU device count replaced by `num_devices`."""
  flags = [f for f in xla_flags.split()
           if not f.startswith('--xla_force_host_platform_device_count')]
  return ' '.join(flags + [f'--xla_force_host_platform_device_count={num_devices}'])


def describe_exit(code: int) -> str:
  if code < 0:
    return f'killed by {signal.Signals(-code).name}'
  return f'exit code {code}'


def last_error_line(lines) -> str:
  """The line that says why: the last 'error:' line, else the last line."""
  lines = [l for l in lines if l.strip()]
  for line in reversed(lines):
    if 'error' in line.lower():
      return line.strip()
  return lines[-1].strip() if lines else '(no output)'


def stop_with_this_process():
  """A Popen preexec_fn that has the kernel send the child SIGTERM when the
  thread that starts it (the launcher's main thread) ends; None off Linux."""
  if not sys.platform.startswith('linux'):
    return None
  prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
  launcher_pid = os.getpid()

  def set_parent_death_signal():
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    # Had the launcher died between the fork and prctl, the child would
    # already belong to another parent and no signal would ever come: it
    # stops before it starts.
    if os.getppid() != launcher_pid:
      os._exit(EXIT_PREEMPTED)  # pylint: disable=protected-access
  return set_parent_death_signal


def _write_all(fd: int, data: bytes) -> None:
  while data:
    try:
      data = data[os.write(fd, data):]
    except BlockingIOError:  # an output another program made non-blocking
      select.select([], [fd], [])


class Launch:
  """N child processes running `main.py ARGS` as one multi-process run."""

  def __init__(self, main_py: str, args: list[str], num_processes: int,
               devices_per_process: int, port: int = 0, out=None):
    # Written with os.write: Python's buffer on a lost terminal would fail
    # again at exit and turn the exit code into 120.
    self._out_fd = (out or sys.stdout).fileno()
    self._out_lost = False
    self._lock = threading.Lock()
    self._tails = [collections.deque(maxlen=_TAIL_LINES) for _ in range(num_processes)]
    # When each process's first 'error:' line (main.py's last words) arrived.
    self._error_at = [None] * num_processes
    self._forwarded = set()  # the signals sent to the processes
    address = f'127.0.0.1:{port or free_port()}'
    env = dict(os.environ)
    if devices_per_process:
      env['XLA_FLAGS'] = with_cpu_devices(env.get('XLA_FLAGS', ''), devices_per_process)
    # All children are forked before any thread starts (preexec_fn is not
    # safe beside threads).
    self.processes = [
        subprocess.Popen(
            [sys.executable, main_py, *args, f'--coordinator_address={address}',
             f'--num_processes={num_processes}', f'--process_id={i}'],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=stop_with_this_process())
        for i in range(num_processes)]
    self._readers = [threading.Thread(target=self._relay, args=(i,), daemon=True)
                     for i in range(num_processes)]
    for t in self._readers:
      t.start()

  def _relay(self, i: int) -> None:
    prefix = f'[p{i}] '.encode()
    for line in self.processes[i].stdout:  # bytes, up to each b'\n'
      text = line.decode('utf-8', errors='replace')
      self._tails[i].append(text)
      if self._error_at[i] is None and text.startswith('error:'):
        self._error_at[i] = time.monotonic()
      self._write(prefix + line)

  def _write(self, data: bytes) -> None:
    with self._lock:
      if self._out_lost:
        return
      try:
        _write_all(self._out_fd, data)
      except OSError:
        self._out_lost = True  # keep reading: a child must never block

  def forward(self, signum: int) -> None:
    """Sends `signum` (as FORWARDED maps it) to every process still running."""
    signum = FORWARDED.get(signum, signum)
    self._forwarded.add(signum)
    for p in self.processes:
      if p.poll() is None:
        try:
          p.send_signal(signum)
        except ProcessLookupError:
          pass

  def wait(self) -> tuple[int, str]:
    """Waits for all; returns (exit code, message)."""
    failed_on_their_own, killed_at, first_stop_at = [], None, None
    while True:
      codes = [p.poll() for p in self.processes]
      if killed_at is None:
        failed_on_their_own = [i for i, code in enumerate(codes)
                               if code is not None and not self._stopped_or_done(code)]
        if failed_on_their_own:
          killed_at = time.monotonic()
          self._kill_others(failed_on_their_own)
      if all(c is not None for c in codes):
        break
      if first_stop_at is None and EXIT_PREEMPTED in codes:
        first_stop_at = time.monotonic()
      if (first_stop_at is not None and not self._forwarded and
          time.monotonic() - first_stop_at > _LONE_STOP_GRACE_S):
        self.forward(signal.SIGTERM)
      time.sleep(_POLL_S)
    for t in self._readers:
      t.join(timeout=5)
    if failed_on_their_own:
      i = self._first_to_fail(failed_on_their_own, codes, killed_at)
      # A cause that the launcher stopped after its error line has no exit
      # code of its own: the run takes that of the first process that
      # failed on its own (both exit 2 when every process refuses a usage).
      code = codes[i] if i in failed_on_their_own else codes[failed_on_their_own[0]]
      exit_text = (describe_exit(code) if i in failed_on_their_own
                   else 'stopped by the launcher after its error')
      return (code if code > 0 else EXIT_FAILURE,
              f'launch: process {i} failed first ({exit_text}): '
              f'{last_error_line(self._tails[i])}')
    if all(c == 0 for c in codes):
      return 0, f'launch: all {len(codes)} processes finished'
    killed = [i for i, c in enumerate(codes) if c < 0]
    if all(c == EXIT_PREEMPTED for c in codes):
      return EXIT_PREEMPTED, (f'launch: all {len(codes)} processes stopped cleanly '
                              '(exit 75: after a save, or before their first step); '
                              'rerun the same command to resume')
    if killed and all(c in (0, EXIT_PREEMPTED) for c in codes if c >= 0):
      return EXIT_PREEMPTED, (
          f'launch: all {len(codes)} processes stopped; ' + ', '.join(
              f'p{i} {describe_exit(codes[i])} (sent by the launcher) before it '
              'could save' for i in killed) +
          ': rerun the same command to resume from the last checkpoint')
    # Some finished and some stopped: not one step for all, so say which.
    return EXIT_FAILURE, 'launch: processes disagree: ' + ', '.join(
        f'p{i} {describe_exit(c)}' for i, c in enumerate(codes))

  def _stopped_or_done(self, code: int) -> bool:
    """Whether exit `code` is a success, a stop after a save, or death by a
    signal that the launcher itself sent: none of them a failure."""
    return code in (0, EXIT_PREEMPTED) or (code < 0 and -code in self._forwarded)

  def _first_to_fail(self, failed: list[int], codes: list[int], killed_at: float) -> int:
    """Which process's failure caused the others'.

    A process killed by a signal that the launcher did not send (SIGKILL,
    the OOM killer) says nothing, and the others' errors follow its death:
    it is the cause. Otherwise the cause is the process whose error line
    came first, among those that failed on their own or said why before the
    launcher killed the rest.
    """
    signalled = [i for i in failed if codes[i] < 0]
    if signalled:
      return signalled[0]
    said_why = [i for i, at in enumerate(self._error_at)
                if at is not None and (i in failed or at <= killed_at)]
    return min(said_why, key=lambda i: self._error_at[i]) if said_why else failed[0]

  def _kill_others(self, failed: list[int]) -> None:
    for j, p in enumerate(self.processes):
      if j not in failed and p.poll() is None:
        try:
          os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass


def _say(line: str) -> None:
  """A line of the launcher's own on stderr, if anyone still reads it."""
  try:
    _write_all(2, (line + '\n').encode())
  except OSError:
    pass


def run(main_py: str, args: list[str], num_processes: int,
        devices_per_process: int, port: int = 0) -> int:
  """Launches, forwards signals until done, prints the outcome; exit code."""
  launch, pending = None, []

  def on_signal(signum, _):
    if launch is None:
      pending.append(signum)  # the processes are being started: sent once they are
    else:
      launch.forward(signum)

  # Handled before any process starts: a signal between the start and the
  # handler would kill the launcher alone and leave its processes running.
  previous = {s: signal.signal(s, on_signal) for s in FORWARDED}
  try:
    launch = Launch(main_py, args, num_processes, devices_per_process, port)
    for signum in pending:
      launch.forward(signum)
    for i, p in enumerate(launch.processes):
      _say(f'launch: process {i} is pid {p.pid}')
    code, message = launch.wait()
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  _say(message)
  return code
