"""Turns SIGTERM and Ctrl-C into "save, then stop" at a step boundary."""

import signal

from absl import logging


class StopRequest:
  """Set by SIGTERM/SIGINT; the loop checks it after each step.

  The first signal asks the loop to finish the current step, save and exit
  (code 75, so that rerunning the command resumes). A second Ctrl-C aborts at
  once, for when the save itself is what the user wants to escape.
  """

  def __init__(self):
    self._requested = False
    self._previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
      self._previous[sig] = signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self._requested and signum == signal.SIGINT:
      raise KeyboardInterrupt
    self._requested = True
    logging.warning('%s received: stopping after this step with a checkpoint '
                    '(Ctrl-C again aborts without saving).',
                    signal.Signals(signum).name)

  def requested(self) -> bool:
    """True when this process was asked to stop (agreement.py makes every
    process stop at the same step)."""
    return self._requested

  def restore_handlers(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
