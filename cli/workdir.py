"""--workdir: its path, and whether it can be a work dir, before any work.

A run writes its config, metrics and checkpoints there. A path that names a
file, or a directory that cannot be created or written, would otherwise fail
only after minutes of compiling, with a traceback.
"""

import os
import tempfile

from core.errors import UsageError


def expand(workdir: str) -> str:
  """`workdir` with a leading ~ or ~user expanded: the path every later step
  uses. A shell leaves `--workdir=~/x` as it is (it expands ~ only at the
  start of a word), which would otherwise be a folder named ~ here."""
  return os.path.expanduser(workdir)


def check(workdir: str) -> None:
  """UsageError unless `workdir` (expanded) is a writable directory or can
  be created."""
  path = os.path.abspath(workdir)
  existing = path
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    if existing == path:
      raise UsageError(f'--workdir={workdir}: exists and is not a directory; '
                       'name a directory (it is created if missing)')
    raise UsageError(f'--workdir={workdir}: cannot be created, since '
                     f'{existing} is not a directory')
  try:
    # An unnamed file where the filesystem allows (O_TMPFILE): nothing is
    # left behind, not even for a moment.
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as e:
    where = ('cannot be written' if existing == path
             else f'cannot be created in {existing}')
    raise UsageError(f'--workdir={workdir}: {where} ({e.strerror or e})') from None
