"""The engine's threads: every failure reaches the loop, none outlives close().

The engine runs its work in threads (the asynchronous workers, the link
transfers, the per-worker tasks of a synchronous step). A failure in any of
them, of any kind (an Exception or a BaseException such as SystemExit), must
end the run with its cause instead of leaving the loop waiting for a result
that never comes; and a thread that does not stop when the engine closes must
be reported, not left running beside the next run's.

Each engine names its threads with its own prefix (`new_prefix`), so that
`join` finds every one of them, those of its thread pools included, without
reaching into the pools.
"""

import functools
import itertools
import sys
import threading
import time
import traceback

from absl import logging

from core.errors import RunFailure

_ENGINE_NUMBERS = itertools.count()

# How long close() waits for an engine's threads to end. A thread finishes
# the phase it is in first (one worker's compute of a step, a paced
# transfer), which on a large model on CPU takes tens of seconds.
CLOSE_TIMEOUT_S = 120.0


class EngineThreadFailed(RuntimeError):
  """A thread of an emulated engine failed; `__cause__` is why."""


def new_prefix() -> str:
  """A thread-name prefix that no other engine of this process uses."""
  return f'ps{next(_ENGINE_NUMBERS)}-'


def failure(what: str, error: BaseException) -> EngineThreadFailed:
  """`error` as an EngineThreadFailed naming `what` (itself if it is one)."""
  if isinstance(error, EngineThreadFailed):
    return error
  wrapped = EngineThreadFailed(f'{what} failed: {type(error).__name__}: {error}')
  wrapped.__cause__ = error
  return wrapped


def guarded(what: str, fn):
  """`fn`, to run in an engine thread: whatever it raises, BaseException
  included, comes out as an EngineThreadFailed naming `what` (a thread pool
  hands it to whoever waits for the result, as an Exception the loop's
  error handling sees)."""
  @functools.wraps(fn)
  def run(*args, **kwargs):
    try:
      return fn(*args, **kwargs)
    except EngineThreadFailed:
      raise
    except BaseException as e:  # pylint: disable=broad-except
      raise failure(what, e) from e
  return run


def alive(prefix: str) -> list[threading.Thread]:
  """The running threads whose names start with `prefix`."""
  return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def join(prefix: str, timeout_s: float, context: str = '') -> None:
  """Waits up to `timeout_s` in all for every thread named `prefix*` to end.

  Raises RunFailure naming those still running, and logs where each one is
  stuck: such a thread would go on touching the engine's buffers, and a
  pool's thread would block the interpreter's exit. `context` (e.g. the
  failure that ended the run) is added to the message.
  """
  deadline = time.monotonic() + timeout_s
  for thread in alive(prefix):
    if thread is not threading.current_thread():
      thread.join(max(0.0, deadline - time.monotonic()))
  stuck = [t for t in alive(prefix) if t is not threading.current_thread()]
  if not stuck:
    return
  frames = sys._current_frames()  # pylint: disable=protected-access
  places = []
  for thread in stuck:
    frame = frames.get(thread.ident)
    stack = traceback.extract_stack(frame) if frame is not None else []
    logging.error('Parameter-server thread %s did not stop; its stack:\n%s', thread.name,
                  ''.join(traceback.format_list(stack)))
    where = f' in {stack[-1].name} ({stack[-1].filename}:{stack[-1].lineno})' if stack else ''
    places.append(f'{thread.name}{where}')
  raise RunFailure(
      f'the emulated engine could not stop {len(stuck)} thread(s) within '
      f'{timeout_s:g} s: {", ".join(places)}{context}; their stacks are in the '
      'log above. The process must exit; rerun the same command to resume from '
      'the last checkpoint')
