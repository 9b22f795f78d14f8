"""Runs one main.py command as N processes on this machine (launch.py).

Each process gets M emulated CPU devices (or the host's accelerators, with
--devices=0), the coordinator flags of a multi-process run on 127.0.0.1,
and the same arguments. The launcher:
  - prefixes every output line with the process index ("[p1] ...");
  - forwards SIGINT and SIGTERM to every process, once per signal it gets,
    so a preempted run saves at one step and exits 75 as one process does
    (the processes run in their own session: a terminal's Ctrl-C reaches
    them only through the launcher, and so only once);
  - when a process fails, kills the others at once (they could only wait
    for it in a collective) and exits with the first failure's code, naming
    the process and its last error line. "First" is the process whose
    `error:` line came first: a failure makes the others' collectives fail
    within milliseconds, so two processes can exit within one poll, and
    the order of the exits does not tell the cause from the consequence.
Exit code: 0 when every process succeeded, 75 when every process stopped
after a clean save, else the first failure's.
"""

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from configs.errors import EXIT_FAILURE, EXIT_PREEMPTED

_POLL_S = 0.1
_TAIL_LINES = 20


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


class Launch:
  """N child processes running `main.py ARGS` as one multi-process run."""

  def __init__(self, main_py: str, args: list[str], num_processes: int,
               devices_per_process: int, port: int = 0, out=None):
    self._out = out or sys.stdout
    self._lock = threading.Lock()
    self._tails = [collections.deque(maxlen=_TAIL_LINES) for _ in range(num_processes)]
    # When each process's first 'error:' line (main.py's last words) arrived.
    self._error_at = [None] * num_processes
    address = f'127.0.0.1:{port or free_port()}'
    env = dict(os.environ)
    if devices_per_process:
      env['XLA_FLAGS'] = with_cpu_devices(env.get('XLA_FLAGS', ''), devices_per_process)
    self.processes = [
        subprocess.Popen(
            [sys.executable, main_py, *args, f'--coordinator_address={address}',
             f'--num_processes={num_processes}', f'--process_id={i}'],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            bufsize=1, start_new_session=True)
        for i in range(num_processes)]
    self._readers = [threading.Thread(target=self._relay, args=(i,), daemon=True)
                     for i in range(num_processes)]
    for t in self._readers:
      t.start()

  def _relay(self, i: int) -> None:
    for line in self.processes[i].stdout:
      self._tails[i].append(line)
      if self._error_at[i] is None and line.startswith('error:'):
        self._error_at[i] = time.monotonic()
      with self._lock:
        self._out.write(f'[p{i}] {line}')
        self._out.flush()

  def forward(self, signum: int) -> None:
    for p in self.processes:
      if p.poll() is None:
        try:
          p.send_signal(signum)
        except ProcessLookupError:
          pass

  def wait(self) -> tuple[int, str]:
    """Waits for all; returns (exit code, message)."""
    failed_on_their_own, killed_at = [], None
    while True:
      codes = [p.poll() for p in self.processes]
      if killed_at is None:
        failed_on_their_own = [i for i, code in enumerate(codes)
                               if code is not None and code not in (0, EXIT_PREEMPTED)]
        if failed_on_their_own:
          killed_at = time.monotonic()
          self._kill_others(failed_on_their_own)
      if all(c is not None for c in codes):
        break
      time.sleep(_POLL_S)
    for t in self._readers:
      t.join(timeout=5)
    if failed_on_their_own:
      i = self._first_to_fail(failed_on_their_own, codes, killed_at)
      code = codes[i]
      exit_text = (describe_exit(code) if i in failed_on_their_own
                   else 'stopped by the launcher after its error')
      return (code if code > 0 else EXIT_FAILURE,
              f'launch: process {i} failed first ({exit_text}): '
              f'{last_error_line(self._tails[i])}')
    if all(c == 0 for c in codes):
      return 0, f'launch: all {len(codes)} processes finished'
    if all(c == EXIT_PREEMPTED for c in codes):
      return EXIT_PREEMPTED, (f'launch: all {len(codes)} processes stopped after '
                              'saving; rerun the same command to resume')
    # Some finished and some stopped: not one step for all, so say which.
    return EXIT_FAILURE, 'launch: processes disagree: ' + ', '.join(
        f'p{i} {describe_exit(c)}' for i, c in enumerate(codes))

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


def run(main_py: str, args: list[str], num_processes: int,
        devices_per_process: int, port: int = 0) -> int:
  """Launches, forwards signals until done, prints the outcome; exit code."""
  launch = Launch(main_py, args, num_processes, devices_per_process, port)
  for i, p in enumerate(launch.processes):
    print(f'launch: process {i} is pid {p.pid}', file=sys.stderr, flush=True)
  previous = {s: signal.signal(s, lambda signum, _: launch.forward(signum))
              for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    code, message = launch.wait()
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  print(message, file=sys.stderr, flush=True)
  return code
