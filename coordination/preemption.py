"""Turns SIGTERM and Ctrl-C into a clean stop: exit 75, nothing lost.

Two phases, one owner of the signals at a time:
  - start-up (main.py calls `stop_start_up_on_signal` first thing): nothing
    has been trained, so there is nothing to save, and the process leaves at
    once with exit 75. Start-up is minutes on a cluster (distributed init,
    data listing, compile) and most of it is spent in native code, where a
    Python signal handler waits until the call returns (the distributed init
    waits up to runtime.init_timeout_s for its peers). So the handler raises
    `StoppedBeforeStart` in the main thread, which unwinds (releasing the
    work dir's lock) whenever it runs Python, and a watcher thread, woken
    by the signal itself (signal.set_wakeup_fd), ends the process after
    _UNWIND_S if the main thread is still held in native code;
  - the training loop (`StopRequest`, created just before it): the signal
    asks the loop to finish the current step (or the current eval batch,
    or the wait for a batch: trainer/input_wait.py), save and exit 75; a
    second Ctrl-C aborts at once (exit 130), saving nothing more. The
    handler runs only when the main thread runs Python, so the first
    signal also starts a watcher thread: when the main thread shows no sign
    of life (`alive`, `requested`) for runtime.stop_held_limit_s and the stop's save has
    not begun (`saving`), it is held in a native call that may never return
    (a collective a peer never joins), and the watcher ends the process
    with exit 75, nothing new saved.
--mode=eval keeps the start-up phase to its end: it writes nothing, so a
stop there loses only the pass, and leaves at once (`during_evaluation`
changes the line it ends with).
`StopRequest` takes the signals over from the start-up guard and, when the
loop ends, restores the handlers that were there before either.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from absl import logging

from core import exit as exit_lib
from core.errors import EXIT_ABORTED, EXIT_PREEMPTED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long the main thread has to unwind from StoppedBeforeStart on its own
# (milliseconds when it runs Python) before the watcher ends the process.
_UNWIND_S = 2.0
# How long process 0 of several waits before it leaves on the held limit.
_PEERS_LEAVE_S = 3.0


class StoppedBeforeStart(BaseException):
  """A stop signal during start-up: nothing trained yet, nothing to save.

  A BaseException, like KeyboardInterrupt, so that no `except Exception` on
  the way up takes it for an error; main.py turns it into exit 75.
  """


_BEFORE_TRAINING = 'before any step was trained (nothing to save)'


def stopped_before_start_message(signum: int, when: str = _BEFORE_TRAINING) -> str:
  return f'stopped by {signal.Signals(signum).name} {when}; rerun the same command'


class _StartUpGuard:
  """The start-up phase's signal handling (one per process)."""

  def __init__(self):
    self.lock = threading.Lock()
    self.armed = False
    self.original_handlers = {}
    self.previous_wakeup_fd = -1
    self.wakeup_write_fd = -1
    self.when = _BEFORE_TRAINING  # what the stop line says was cut short

  def arm(self) -> None:
    read_fd, self.wakeup_write_fd = os.pipe()
    os.set_blocking(self.wakeup_write_fd, False)  # set_wakeup_fd requires it
    for sig in STOP_SIGNALS:
      self.original_handlers[sig] = signal.signal(sig, self._raise_in_main_thread)
    self.previous_wakeup_fd = signal.set_wakeup_fd(self.wakeup_write_fd,
                                                   warn_on_full_buffer=False)
    self.armed = True
    threading.Thread(target=self._end_if_held_in_native_code, args=(read_fd,),
                     name='stop-during-start-up', daemon=True).start()

  def disarm(self) -> dict:
    """Ends the start-up phase; returns the handlers from before it ({} if
    it was not armed)."""
    with self.lock:  # after this, the watcher leaves the process alone
      if not self.armed:
        return {}
      self.armed = False
    signal.set_wakeup_fd(self.previous_wakeup_fd)
    os.close(self.wakeup_write_fd)  # the watcher reads EOF and ends
    return self.original_handlers

  def _raise_in_main_thread(self, signum, frame):
    del frame
    if self.armed:
      raise StoppedBeforeStart(stopped_before_start_message(signum, self.when))

  def _end_if_held_in_native_code(self, read_fd: int) -> None:
    stop_numbers = {int(s) for s in STOP_SIGNALS}
    try:
      while True:
        received = os.read(read_fd, 64)  # the numbers of the signals caught
        if not received:
          return  # disarmed: the training loop owns the signals now
        signums = [n for n in received if n in stop_numbers]
        if signums:
          break
      time.sleep(_UNWIND_S)
      with self.lock:
        if self.armed:
          try:  # like main.py's last line; stderr may be gone with the launcher
            os.write(2, (stopped_before_start_message(signums[0], self.when) + '\n').encode())
          finally:
            os._exit(EXIT_PREEMPTED)  # pylint: disable=protected-access
    finally:
      os.close(read_fd)


_start_up = _StartUpGuard()


def stop_start_up_on_signal() -> None:
  """From now until the training loop starts (StopRequest), SIGTERM and
  SIGINT end this process promptly with exit 75. Call from the main thread."""
  if not _start_up.armed:
    _start_up.arm()


def during_evaluation(step: int) -> None:
  """--mode=eval: a stop from now on says it ended the evaluation of
  checkpoint `step`, which wrote nothing."""
  _start_up.when = f'during the evaluation of step {step} (nothing written)'


def during_prediction() -> None:
  """--mode=predict: a stop from now on says it ended the prediction,
  which wrote nothing (predict.output is written whole at the end)."""
  _start_up.when = 'during prediction (nothing written)'


class StopRequest:
  """Set by SIGTERM/SIGINT; the loop checks it after each step and between
  eval batches.

  The first signal asks the loop to finish the current step, save and exit
  (code 75, so that rerunning the command resumes). A second Ctrl-C raises
  KeyboardInterrupt, which the training ends with `abort_now`: at once, for
  when the save itself is what the user wants to escape.
  """

  def __init__(self, held_limit_s: float):
    """held_limit_s: how long the main thread may stay out of Python after
    the first signal before the watcher ends the process (runtime.stop_held_limit_s)."""
    self._requested = False
    self._held_limit_s = held_limit_s
    self._last_alive = time.monotonic()
    self._standing_down = False  # the loop saves or has ended: no watcher
    self._saves_running = 0
    previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
    # Handlers first, then the start-up guard off: a signal in between is
    # this object's (the loop then saves and stops) or ended the start-up.
    self._previous = _start_up.disarm() or previous

  def _handle(self, signum, frame):
    del frame
    if self._requested and signum == signal.SIGINT:
      raise KeyboardInterrupt
    if not self._requested:
      threading.Thread(target=self._end_if_held_in_native_code, args=(signum,),
                       name='stop-during-training', daemon=True).start()
    self._requested = True
    logging.warning('%s received: stopping after this step with a checkpoint '
                    '(Ctrl-C again aborts without saving).',
                    signal.Signals(signum).name)

  def requested(self) -> bool:
    """True when this process was asked to stop (agreement.py makes every
    process stop at the same step). Asking shows the main thread runs Python."""
    self.alive()
    return self._requested

  def alive(self) -> None:
    """The loop's main thread runs Python (the watcher's sign of life)."""
    self._last_alive = time.monotonic()

  def saving(self) -> None:
    """The loop has begun the stop's save (or its last one): the watcher
    leaves it to finish (a second Ctrl-C is the way out of a save that does
    not end)."""
    self._standing_down = True

  @contextlib.contextmanager
  def in_save(self):
    """A save of the loop's cadence: the watcher waits for its end, which is
    a sign of life, rather than cut it short."""
    self._saves_running += 1
    try:
      yield
    finally:
      self._saves_running -= 1
      self.alive()

  def _end_if_held_in_native_code(self, signum: int) -> None:
    """After a stop signal: ends the process with exit 75, nothing new saved,
    when the main thread has shown no sign of life for the held limit."""
    signalled = time.monotonic()
    while not self._standing_down:
      if self._saves_running:
        self.alive()
      held_s = time.monotonic() - max(signalled, self._last_alive)
      if held_s >= self._held_limit_s:
        _let_peers_leave_first()
        exit_lib.exit_with_last_line(
            f'{_this_process()}stopped by {signal.Signals(signum).name} while the '
            f'training loop was held in a native call for {held_s:.0f} s (a '
            'collective, a device or an input wait); nothing new saved, the last '
            'checkpoint stands: rerun the same command to resume', EXIT_PREEMPTED)
      time.sleep(0.25)

  def restore_handlers(self) -> None:
    self._standing_down = True
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def _let_peers_leave_first() -> None:
  """Process 0 hosts the distributed runtime's coordinator: when it leaves
  first, a peer still running is aborted by the runtime (SIGABRT) before
  its own line. So process 0 of a run of several waits a moment."""
  jax = sys.modules.get('jax')
  if (jax is not None and jax.distributed.is_initialized() and jax.process_count() > 1
      and jax.process_index() == 0):
    time.sleep(_PEERS_LEAVE_S)


def _this_process() -> str:
  """'process 1: ' in a run of several processes, else ''."""
  jax = sys.modules.get('jax')
  if jax is None or not jax.distributed.is_initialized() or jax.process_count() == 1:
    return ''
  return f'process {jax.process_index()}: '


def abort_now(line: str) -> None:
  """Ends the process with EXIT_ABORTED, `line` the last line of standard
  error, at once (core/exit.py): a save cut short is never a checkpoint."""
  exit_lib.exit_with_last_line(line, EXIT_ABORTED)
