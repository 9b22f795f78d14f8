"""Leaving the process at once with one last line on standard error."""

import os
import sys


def exit_with_last_line(line: str, code: int) -> None:
  """Writes `line` as the last line of stderr and ends the process, without
  the interpreter's exit.

  The interpreter's exit waits for every non-daemon thread (orbax's save
  threads among them, and a save that does not end is what a second Ctrl-C
  escapes) and, in a multi-process run, in JAX's shutdown barrier for the
  other processes. orbax's threads also print tracebacks of the same failure
  while this one prints: stderr is pointed at /dev/null for every other
  writer before `line` goes out on a copy of it.
  """
  try:  # stdout and stderr may be gone (a launcher that died): leave all the same
    sys.stdout.flush()
    sys.stderr.flush()
    ours = os.dup(2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.write(ours, (line + '\n').encode())
  finally:
    os._exit(code)  # pylint: disable=protected-access
