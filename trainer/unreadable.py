"""The examples no process could read: counted once each, named in the work dir.

The data sets skip an image that cannot be decoded and remember which one
(input_pipeline.Dataset.unreadable_examples). A training example comes back
every epoch and, in another epoch, on another process; so the count a user
wants is that of distinct names over all processes. Each process sends the
names it has not sent yet, every process merges them, and process 0 rewrites
`unreadable_files.txt` (one name per line, sorted, each once) when the set
grows. It survives restarts: a resumed run starts from the file.
"""

import os

import numpy as np

from coordination import agreement
from core import atomic

FILE_NAME = 'unreadable_files.txt'


def read(workdir: str) -> list[str]:
  """The names in a work dir's unreadable_files.txt ([] when there is none)."""
  path = os.path.join(workdir, FILE_NAME)
  if not os.path.exists(path):
    return []
  with open(path, encoding='utf-8') as f:
    return [line.rstrip('\n') for line in f if line.strip()]


def _encode(names: list[str]) -> np.ndarray:
  return np.frombuffer('\n'.join(names).encode(), np.uint8)


def _decode(data: np.ndarray) -> list[str]:
  text = data.tobytes().decode()
  return text.split('\n') if text else []


class UnreadableExamples:
  """The distinct unreadable examples of a work dir, over all processes.

  `update` is a collective when there is more than one process: every
  process calls it at the same step (the log steps, after an evaluation).
  """

  def __init__(self, workdir: str, dataset, *, process_count: int,
               is_chief: bool, allgather=agreement.gather_from_processes):
    self._path = os.path.join(workdir, FILE_NAME)
    self._dataset = dataset
    self._process_count = process_count
    self._is_chief = is_chief
    self._allgather = allgather
    self._sent: set[str] = set()  # this process's names already merged
    self._names = set(read(workdir))  # all processes', earlier runs' too

  def count(self) -> int:
    """Distinct unreadable examples so far: all processes, both splits,
    earlier runs in this work dir."""
    return len(self._names)

  def update(self) -> None:
    """Merges every process's new names; process 0 rewrites the file if the
    set grew."""
    found = self._dataset.unreadable_examples()
    new = sorted(set().union(*found.values()) - self._sent)
    self._sent.update(new)
    if self._process_count > 1:
      new = self._exchange(new)
    added = set(new) - self._names
    if not added:
      return
    self._names |= added
    if self._is_chief:
      atomic.write_text(self._path,
                        ''.join(name + '\n' for name in sorted(self._names)))

  def _exchange(self, new: list[str]) -> list[str]:
    """The union of every process's `new`: a gather of the sizes, and of the
    names only when some process has any."""
    data = _encode(new)
    sizes = self._allgather(np.array([len(new), len(data)], np.int64))
    if not sizes[:, 0].any():
      return []
    padded = np.zeros(int(sizes[:, 1].max()), np.uint8)
    padded[:len(data)] = data
    gathered = self._allgather(padded)
    return sorted({name for row, size in zip(gathered, sizes[:, 1])
                   for name in _decode(row[:size])})
