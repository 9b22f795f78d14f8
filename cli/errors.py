"""The one exception type that means "the user asked for something invalid"."""


class UsageError(Exception):
  """A bad flag, config value, work dir or data location.

  main.py prints its message as one line on standard error and exits with
  code 2, without a traceback: the message must name the key (or flag, or
  path) and what is accepted instead.
  """

EXIT_USAGE = 2
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped after a clean save; rerun resumes.
