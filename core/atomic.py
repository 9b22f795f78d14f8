"""Whole-file writes: a reader, a crash or a second writer never sees half a file.

The data goes to a temporary file beside the target, which is flushed to disk
and then renamed over it; readers see the old file or the new one. Each
writer has a temporary name of its own, so processes that write the same file
at once leave one of their files whole. On a failure (a full disk, a signal)
the temporary file is removed and the target is left as it was.

Local paths only: a remote file system (gs://) needs TensorFlow's file layer,
which this layer does not import.
"""

import os
import uuid


def write_bytes(path: str, data: bytes) -> None:
  """Replaces the file at `path` by `data`, atomically."""
  temporary = f'{path}.tmp-{uuid.uuid4().hex}'
  try:
    # os.open with 0o666 leaves the permissions to the umask, as open() does
    # (tempfile.mkstemp would make the file private to its owner).
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      # On disk before the rename: a power loss must not leave the new name
      # on an empty file.
      os.fsync(f.fileno())
    os.replace(temporary, path)
  except BaseException:
    try:
      os.remove(temporary)
    except OSError:
      pass  # never created, or already renamed
    raise


def write_text(path: str, text: str) -> None:
  """Replaces the file at `path` by `text` in UTF-8, atomically."""
  write_bytes(path, text.encode('utf-8'))
