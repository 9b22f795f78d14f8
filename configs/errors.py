"""Exceptions that end a run with one line instead of a traceback."""


class UsageError(Exception):
  """A bad flag, config value, work dir or data location.

  main.py prints its message as one line on standard error and exits with
  code 2, without a traceback: the message must name the key (or flag, or
  path) and what is accepted instead.
  """


class RunFailure(Exception):
  """The run itself failed for a reason one line can state (exit code 1).

  Whatever could be kept (the last good checkpoint) is kept; the message says
  what happened and what to change.
  """

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped after a clean save; rerun resumes.
