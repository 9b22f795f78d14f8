"""Decisions that every process of a run must make alike.

A save is a collective (orbax writes every process's shards together) and
so is every train step: if one process decided to save or to stop at a step
where another did not, the run would deadlock. So the decisions that depend
on something one process sees (a signal it received, the clock of
checkpoint.every_minutes) are exchanged at fixed steps,
runtime.agree_every_steps apart, in one small all-gather: a stop request on
any process stops all; a time-based save follows process 0's clock. Between
those steps no process waits for the others, so the host keeps dispatching
ahead of the devices. With one process the decisions are local and free,
and made after every step.

Before any of that, `check_same_run` makes sure the processes are running
the same run at all: each works out from its own view of the file system
the checkpoint it starts from, the data's size (so the training length) and
its config. If those differed, the collectives would stop matching while
every process stayed alive, and nothing would ever end the run.
"""

import json

from flax import traverse_util
import jax
import numpy as np

from core.errors import RunFailure, UsageError

# Config keys that name where a process finds things on its own host: each
# host may hold the same data or cache at a path of its own. What the data
# hold is compared instead (the example counts).
PER_PROCESS_KEYS = frozenset({'data.dir', 'data.manual_dir', 'eval.data_dir',
                              'init.from_workdir', 'runtime.compilation_cache_dir'})

_SAME_COMMAND = 'start every process with the same command'
_SAME_DATA = 'every process must read the same data'
_SAME_CHECKPOINTS = ('every process must see the same checkpoints (on shared '
                     'storage, one may not show a checkpoint yet)')
# What check_same_run compares besides the config: what it is called, what
# to do about a difference, and how the run ends (a difference in the data
# is bad input; one in the checkpoints, a fault of the storage).
FACTS = {
    'num_train_examples': ('the number of training examples', _SAME_DATA, UsageError),
    'num_eval_examples': ('the number of evaluation examples', _SAME_DATA, UsageError),
    'total_steps': ('the training length in steps', _SAME_DATA, UsageError),
    'resume_step': ('the step to resume from', _SAME_CHECKPOINTS, RunFailure),
    'init_step': ("the step of init.from_workdir's checkpoint", _SAME_CHECKPOINTS, RunFailure),
    'eval_checkpoint': ('the checkpoint to evaluate', _SAME_CHECKPOINTS, RunFailure),
}


class Agreement:

  def __init__(self, process_count: int, every_steps: int):
    self._process_count = process_count
    self._every_steps = every_steps if process_count > 1 else 1

  def due(self, step: int) -> bool:
    """Whether processes agree after `step` (the same answer on all)."""
    return step % self._every_steps == 0

  def decide(self, stop_requested: bool, save_due_here: bool) -> tuple[bool, bool]:
    """(stop, save): stop if any process was asked to; save if process 0's
    clock says so."""
    return self.decide_and_share(stop_requested, save_due_here, np.zeros(0, np.float32))[:2]

  def decide_and_share(self, stop_requested: bool, save_due_here: bool,
                       figures: np.ndarray) -> tuple[bool, bool, np.ndarray | None]:
    """decide's (stop, save), and every process's `figures` (float32, the
    same length on all) in the same all-gather: [process_count, len]. None
    for the figures with one process, which has no peers to compare."""
    if self._process_count == 1:
      return stop_requested, save_due_here, None
    rows = gather_from_processes(np.concatenate(
        [np.array([stop_requested, save_due_here], np.float32), figures.astype(np.float32)]))
    return bool(rows[:, 0].any()), bool(rows[0, 1]), rows[:, 2:]


def gather_from_processes(array: np.ndarray) -> np.ndarray:
  """[process_count, ...]: every process's `array` (a collective: call it
  on every process at the same point)."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return np.asarray(multihost_utils.process_allgather(array)).reshape(-1, *array.shape)


def check_same_run(config, **facts) -> None:
  """Ends every process with the same one line unless all see the same run.

  facts: values of FACTS's keys, as this process worked them out (None:
  none, e.g. no checkpoint to resume from). With the config less
  PER_PROCESS_KEYS, they are exchanged once; the first that differs from
  process 0's raises FACTS's error (config keys: UsageError). The config
  goes whole, not as a hash (a few kB, once per run), so that the line can
  name the key. A collective: call it on every process at the same point,
  before the first step.
  """
  if jax.process_count() == 1:
    return
  views = gather_json({'config': comparable_config(config), 'facts': facts})
  error = first_difference(views)
  if error is not None:
    raise error


def comparable_config(config) -> dict:
  """{'data.source': 'shapes', ...}: the config's keys that every process
  must hold alike."""
  flat = traverse_util.flatten_dict(config.to_dict(), sep='.')
  return {k: v for k, v in flat.items() if k not in PER_PROCESS_KEYS}


def first_difference(views: list[dict]) -> Exception | None:
  """The error naming the first config key, then fact, whose value on some
  process is not process 0's; None when all agree. views: check_same_run's
  {'config': ..., 'facts': ...} of each process, in process order."""
  reference = views[0]
  in_order = {'config': list(reference['config']),  # the schema's order
              'facts': [k for k in FACTS if k in reference['facts']]}
  for section, keys in in_order.items():
    for key in keys:
      for index, view in enumerate(views[1:], start=1):
        ours, theirs = reference[section][key], view[section].get(key)
        if json.dumps(ours) == json.dumps(theirs):
          continue
        what, remedy, error = ((f'config key {key}', _SAME_COMMAND, UsageError)
                               if section == 'config' else FACTS[key])
        return error(f'processes disagree on {what}: {_shown(theirs)} on process '
                     f'{index}, {_shown(ours)} on process 0; {remedy}')
  return None


def _shown(value) -> str:
  return 'none' if value is None else json.dumps(value)


def gather_json(value) -> list:
  """Every process's `value` (anything json.dumps takes), in process order.
  A collective, like gather_from_processes."""
  mine = np.frombuffer(json.dumps(value).encode(), np.uint8)
  sizes = gather_from_processes(np.array([mine.size], np.int32))[:, 0]
  padded = np.zeros(int(sizes.max()), np.int32)
  padded[:mine.size] = mine
  rows = gather_from_processes(padded)
  return [json.loads(row[:size].astype(np.uint8).tobytes())
          for row, size in zip(rows, sizes)]
