"""Exceptions that end a run with one line instead of a traceback."""

# Every character that ends a line (str.splitlines), as its escape: a path or
# value in a message may hold one, and the message must stay one line.
_LINE_BREAKS = {ord(c): ascii(c)[1:-1] for c in
                '\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029'}


class OneLineError(Exception):
  """An error whose message prints as one line, whatever text it quotes."""

  def __str__(self) -> str:
    return super().__str__().translate(_LINE_BREAKS)


class UsageError(OneLineError):
  """A bad flag, config value, work dir or data location.

  main.py prints its message as one line on standard error and exits with
  code 2, without a traceback: the message must name the key (or flag, or
  path) and what is accepted instead.
  """


class RunFailure(OneLineError):
  """The run itself failed for a reason one line can state (exit code 1).

  Whatever could be kept (the last good checkpoint) is kept; the message says
  what happened and what to change.
  """

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped after a clean save; rerun resumes.
EXIT_ABORTED = 130  # 128 + SIGINT: a second Ctrl-C, nothing saved; rerun resumes.
EXIT_INPUT_STALLED = 69  # EX_UNAVAILABLE: the input pipeline stopped producing; nothing new saved.


class InputStalled(OneLineError):
  """The input pipeline produced no batch within its limit (data.stall_timeout_s):
  the run ends with EXIT_INPUT_STALLED, its last checkpoint intact."""
