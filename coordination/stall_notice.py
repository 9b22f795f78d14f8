"""A stalled input pipeline ends every process of a run, not only its own.

When one process's pipeline stalls (trainer/input_wait.py), its peers are
held in a native call (the step's collective, a fetch of its metrics) that
waits for it for ever: they cannot be asked in a collective. So the stalled
process publishes its line in the distributed runtime's key-value store,
which lives in the coordinator, not in a collective, and every process runs
a watcher thread that polls the store and, once the line is there, ends its
process with the stall's exit code and one line naming the stalled one.
"""

import contextlib
import threading
import time

from absl import logging

from core import exit as exit_lib
from core.errors import EXIT_INPUT_STALLED, InputStalled

_KEY = 'imagetrain/input_stalled'
_POLL_S = 1.0
# How long a process stays after it published the stall, or (process 0,
# which hosts the store) after it saw one, so that every watcher has polled
# at least twice before the store or a peer of their collectives is gone.
_PEERS_SEE_S = 3 * _POLL_S

_published = threading.Event()  # set in the process that published
# Set when the training ends: the watcher stops polling before the runtime
# shuts down, so that no call into the distributed client races its end.
_done = threading.Event()
_watcher: threading.Thread | None = None


def _client():
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state.client


def watch_for_a_peer_stall(process_index: int) -> None:
  """Starts the watcher of this process (call once, in a run of several)."""
  global _watcher
  _done.clear()
  _watcher = threading.Thread(target=_watch, args=(process_index,), daemon=True,
                              name='watch-for-input-stall')
  _watcher.start()


def stop_watching() -> None:
  """Ends the watcher, waiting for its poll in flight (the training is over:
  what follows is the runtime's shutdown)."""
  _done.set()
  if _watcher is not None:
    _watcher.join()


def after_loop(error: Exception | None, process_index: int) -> None:
  """Once a run of several processes has left the loop that waits for
  input (training, or the probe's timing of its pipeline): stops the
  watcher, then, when the loop failed, publishes this process's own stall,
  or leaves with a peer's (a peer's stall is why a collective here failed)."""
  stop_watching()
  if isinstance(error, InputStalled):
    publish(f'on process {process_index}, {error}')
  elif error is not None:
    leave_if_a_peer_stalled(process_index)


@contextlib.contextmanager
def shared(process_index: int, process_count: int):
  """Within it, one process's stalled input ends every process: its
  InputStalled is published as it leaves, and a peer's ends this one (exit
  69). A run of one process has nothing to share."""
  if process_count == 1:
    yield
    return
  watch_for_a_peer_stall(process_index)
  error = None
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    error = e
    raise
  finally:
    after_loop(error, process_index)


def publish(line: str) -> None:
  """Tells every process that this one's input stalled (`line` says how),
  then gives their watchers a moment to see it."""
  _published.set()
  try:
    _client().key_value_set(_KEY, line)
  except Exception as e:  # pylint: disable=broad-except
    # Another process published first (the key is set once), or the
    # coordinator is gone: either way the others know or cannot be told.
    logging.warning('Could not publish the input stall: %s', e)
    return
  time.sleep(_PEERS_SEE_S)


def leave_if_a_peer_stalled(process_index: int) -> None:
  """Ends this process with the stall's code and line if another process
  published one; returns otherwise. Also for a process whose collective
  failed because the stalled peer left: the stall is the cause to report."""
  client = _client()
  if client is None or _published.is_set():
    return
  try:
    line = client.key_value_try_get(_KEY)
  except Exception:  # pylint: disable=broad-except
    return  # not there (NOT_FOUND), or the coordinator is gone
  if line and not _published.is_set():
    if process_index == 0:  # the store leaves with it: let the others see
      time.sleep(_PEERS_SEE_S)
    exit_lib.exit_with_last_line(f'error: process {process_index}: {line}',
                                 EXIT_INPUT_STALLED)


def _watch(process_index: int) -> None:
  while not _published.is_set() and not _done.is_set() and _client() is not None:
    leave_if_a_peer_stalled(process_index)
    _done.wait(_POLL_S)
