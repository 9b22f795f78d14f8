"""One owner per work dir: the lock a run holds while it writes there.

Two runs writing into one work dir would interleave their checkpoints,
metrics and config.json (a rerun started while the first run still goes on,
a launcher killed while its trainers live on). So every mode that writes into
the work dir (train, bench, plan, study) takes `run.lock` there before it
writes anything else, and removes it when it ends: normally, with an error
or stopped after a save (exit 75). `--mode=eval` only reads, takes no lock
and may run beside the owner. In a multi-process run process 0 holds the
lock and tells every process whether it got it, so that all of them stop
with the same line when another run owns the work dir.

The lock is a file created with O_EXCL (atomic on local file systems and on
NFS): no fcntl/flock, which do not reach across hosts on every shared file
system. It names its owner: host, pid, mode, start time, and what tells a
reused pid or a restarted machine apart (the process's start time in clock
ticks since boot, and the boot id). A SIGKILL, a crash or a lost machine
leaves it behind; it is then stale, and the next run takes it over with a
warning:
- the owner on this host: stale once its process is gone (no such pid, the
  pid now belongs to a later process, or the machine restarted since);
- the owner on another host, whose processes this host cannot see (or a
  lock file too damaged to name its owner): the owner touches the file
  every REFRESH_S seconds while it lives, and a lock not touched for
  LEASE_S seconds is stale. Until then it counts as held,
  and the error names the file to delete if that run is known to be gone.
  This assumes that the hosts' clocks and the file server's agree to well
  within LEASE_S, and that a host name names one machine (one pid space).
"""

import contextlib
import datetime
import json
import os
import socket
import threading
import time
import uuid

from absl import logging
import numpy as np

from core.errors import UsageError

LOCK_FILE_NAME = 'run.lock'
REFRESH_S = 60.0  # how often the owner touches its lock
LEASE_S = 600.0  # a lock of another host not touched for this long is stale
_MAX_MESSAGE_BYTES = 2048  # process 0's error line, as sent to the others
_held_here: set[str] = set()  # the tokens of the locks this process holds


def _boot_id() -> str | None:
  try:
    with open('/proc/sys/kernel/random/boot_id') as f:
      return f.read().strip()
  except OSError:
    return None  # not Linux


def _process_start_ticks(pid: int) -> int | None:
  """When process `pid` started, in clock ticks since boot (Linux); None if
  it does not exist or this system does not say."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      stat = f.read()
    # The command name (field 2) may hold spaces and parentheses; the start
    # time is the 22nd field, the 20th after the name's closing parenthesis.
    return int(stat[stat.rindex(')') + 2:].split()[19])
  except (OSError, ValueError, IndexError):
    return None


def _process_exists(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  return True


def _owner_record(mode: str) -> dict:
  """What the lock says about this process."""
  return {'host': socket.gethostname(), 'pid': os.getpid(), 'mode': mode,
          'started': datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
          'boot_id': _boot_id(), 'pid_start_ticks': _process_start_ticks(os.getpid()),
          'token': uuid.uuid4().hex}


def _why_stale(owner: dict | None, age_s: float) -> str | None:
  """Why the lock of `owner` (None: unreadable), last touched `age_s`
  seconds ago, is stale; None while it may still be held."""
  if owner is None or owner.get('host') != socket.gethostname():
    if age_s > LEASE_S:
      return f'not refreshed for {age_s / 60:.0f} minutes'
    return None
  boot_id = _boot_id()
  if owner.get('boot_id') and boot_id and owner['boot_id'] != boot_id:
    return 'its host has restarted since'
  pid = owner.get('pid')
  if pid == os.getpid():
    # Unless this process holds it, the pid's holder was an earlier process
    # (a restarted container reuses low pids).
    return None if owner.get('token') in _held_here else 'its process is gone'
  if not isinstance(pid, int) or not _process_exists(pid):
    return 'its process is gone'
  recorded, now = owner.get('pid_start_ticks'), _process_start_ticks(pid)
  if recorded is not None and now is not None and recorded != now:
    return 'its process is gone (the pid now belongs to another process)'
  return None


class WorkdirLock:
  """The lock file of one work dir, taken by `acquire`, removed by `release`."""

  def __init__(self, workdir: str, mode: str, *, refresh_s: float = REFRESH_S):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_FILE_NAME)
    self._mode = mode
    self._refresh_s = refresh_s
    self._record: dict | None = None
    self._created_dirs: list[str] = []
    self._stop_refreshing = threading.Event()
    self._refresher: threading.Thread | None = None

  def acquire(self) -> None:
    """Takes the lock (creating the work dir if missing); UsageError naming
    the owner when another run holds it."""
    try:
      self._created_dirs = _make_dirs(self.workdir)
    except OSError as e:
      raise UsageError(f'--workdir={self.workdir}: cannot be created '
                       f'({e.strerror or e})') from None
    self._stop_refreshing.clear()
    try:
      for _ in range(5):  # a stale lock removed, or a race with another taker
        if self._try_create():
          self._refresher = threading.Thread(target=self._refresh_until_released,
                                             name='workdir-lock', daemon=True)
          self._refresher.start()
          return
      raise UsageError(f'--workdir={self.workdir}: another run took {self.path} at '
                       'the same moment; rerun to see which')
    except BaseException:
      self._remove_created_dirs()
      raise

  def release(self) -> None:
    """Removes the lock if it is still this run's, and the work dir if this
    run created it and left it empty."""
    if self._record is None:
      return
    self._stop_refreshing.set()
    if self._refresher is not None:
      self._refresher.join()
    if self._still_ours():
      os.remove(self.path)
    _held_here.discard(self._record['token'])
    self._record = None
    self._remove_created_dirs()

  def _try_create(self) -> bool:
    """True once the lock is this run's; False if it should be tried again."""
    record = _owner_record(self._mode)
    data = json.dumps(record).encode()
    try:
      fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
      self._take_over_if_stale()
      return False
    except OSError as e:
      raise UsageError(f'--workdir={self.workdir}: cannot create {self.path} '
                       f'({e.strerror or e})') from None
    try:
      try:
        os.write(fd, data)
        os.fsync(fd)
      finally:
        os.close(fd)
    except OSError as e:  # a full disk: leave no empty lock behind
      os.remove(self.path)
      raise UsageError(f'--workdir={self.workdir}: cannot write {self.path} '
                       f'({e.strerror or e})') from None
    self._record = record
    _held_here.add(record['token'])
    return True

  def _take_over_if_stale(self) -> None:
    """Raises UsageError if the existing lock is held; else removes it."""
    try:
      with open(self.path, 'rb') as f:
        data = f.read()
      age_s = time.time() - os.stat(self.path).st_mtime
    except FileNotFoundError:
      return  # released meanwhile
    owner = _parse(data)
    reason = _why_stale(owner, age_s)
    if reason is None:
      raise UsageError(self._held_message(owner, age_s))
    logging.warning('%s: taking over the lock of %s: %s', self.path,
                    _describe(owner), reason)
    _remove_if_unchanged(self.path, data)

  def _held_message(self, owner: dict | None, age_s: float) -> str:
    if owner is None:
      return (f'--workdir={self.workdir} is locked by an unreadable {self.path} '
              f'(touched {age_s:.0f} s ago); if no run uses this work dir, delete '
              f'{self.path}')
    start = f'--workdir={self.workdir} is in use by {_describe(owner)}'
    if owner.get('host') == socket.gethostname():
      return f'{start}; wait for it to end or stop it, or use another --workdir'
    return (f'{start}; this host cannot see that process: if that run is gone, '
            f'delete {self.path} (an abandoned lock also expires '
            f'{LEASE_S / 60:.0f} minutes after its owner last touched it)')

  def _still_ours(self) -> bool:
    try:
      with open(self.path, 'rb') as f:
        owner = _parse(f.read())
    except FileNotFoundError:
      return False
    return owner is not None and owner.get('token') == self._record['token']

  def _refresh_until_released(self) -> None:
    """Touches the lock every refresh_s: how another host tells it is held."""
    while not self._stop_refreshing.wait(self._refresh_s):
      if not self._still_ours():
        logging.warning('%s is no longer this run\'s lock (deleted by hand?); '
                        'another run may now write into %s', self.path, self.workdir)
        return
      try:
        os.utime(self.path)
      except OSError as e:
        logging.warning('Cannot touch %s: %s', self.path, e)

  def _remove_created_dirs(self) -> None:
    for directory in reversed(self._created_dirs):
      try:
        os.rmdir(directory)  # only if empty: a failed start leaves no trace
      except OSError:
        break
    self._created_dirs = []


def _make_dirs(path: str) -> list[str]:
  """os.makedirs(path); returns the directories it created, outermost first."""
  missing = []
  while path and not os.path.isdir(path):
    missing.append(path)
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  created = []
  for directory in reversed(missing):
    try:
      os.mkdir(directory)
      created.append(directory)
    except FileExistsError:
      pass  # made meanwhile by another process
  return created


def _parse(data: bytes) -> dict | None:
  try:
    owner = json.loads(data)
  except ValueError:
    return None  # being written this instant, or damaged
  return owner if isinstance(owner, dict) else None


def _describe(owner: dict | None) -> str:
  if owner is None:
    return 'an unknown run'
  return (f'a {owner.get("mode", "?")} run (host {owner.get("host")}, pid '
          f'{owner.get("pid")}, since {owner.get("started")})')


def _remove_if_unchanged(path: str, data: bytes) -> None:
  """Removes the lock file at `path` if it still holds `data`.

  Two runs may find the same stale lock; the first to remove it creates its
  own at once, which the second must not remove. So the file is first moved
  aside (only one mover succeeds) and put back if it is no longer the stale
  one.
  """
  aside = f'{path}.stale-{socket.gethostname()}-{os.getpid()}'
  try:
    os.rename(path, aside)
  except FileNotFoundError:
    return
  with open(aside, 'rb') as f:
    moved = f.read()
  if moved != data:
    try:
      os.link(aside, path)  # fails if yet another run took the name
    except OSError:
      pass
  os.remove(aside)


@contextlib.contextmanager
def hold(workdir: str, mode: str, *, process_index: int = 0, process_count: int = 1,
         allgather=None):
  """The work dir's lock for the body: process 0 takes it; if another run
  holds it, every process raises the same UsageError. allgather: how the
  processes exchange arrays (default: agreement.gather_from_processes)."""
  lock = WorkdirLock(workdir, mode) if process_index == 0 else None
  failure, error = None, None
  if lock is not None:
    try:
      lock.acquire()
    except Exception as e:  # pylint: disable=broad-except
      # Told to the others before it is raised: they wait for the answer.
      failure, error = e, str(e) if isinstance(e, UsageError) else (
          f'process 0 could not take the lock of --workdir={workdir}: '
          f'{type(e).__name__}: {e}')
  if process_count > 1:
    if allgather is None:
      # Here, not at the top: the lock alone needs no jax.
      from coordination import agreement  # pylint: disable=g-import-not-at-top
      allgather = agreement.gather_from_processes
    error = _from_process_zero(error, allgather)
  if failure is not None:
    raise failure
  if error is not None:
    raise UsageError(error)
  try:
    yield lock
  finally:
    if lock is not None:
      lock.release()


def _from_process_zero(error: str | None, allgather) -> str | None:
  """Process 0's `error` on every process (a collective)."""
  message = np.zeros(_MAX_MESSAGE_BYTES + 1, np.uint8)
  if error is not None:
    text = error.encode()[:_MAX_MESSAGE_BYTES]
    message[0] = 1
    message[1:1 + len(text)] = np.frombuffer(text, np.uint8)
  first = allgather(message)[0]
  if not first[0]:
    return None
  return first[1:].tobytes().rstrip(b'\0').decode(errors='replace')
