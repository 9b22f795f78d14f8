"""Checkpoints with orbax: asynchronous, atomic, keep-N, best-by-accuracy.

A checkpoint holds the TrainState and a small JSON record (the step, which is
also the data position, since the training stream is a pure function of
(seed, step); plus the eval accuracy when known). Orbax writes each step into
a temporary directory and renames it when complete, so an interrupted save is
never mistaken for a checkpoint. Restoring takes the abstract state with the
*current* mesh's shardings, so a checkpoint written on one mesh or device
count restores onto another.
"""

import os

from absl import logging
import jax
import orbax.checkpoint as ocp

from cli.errors import UsageError

LATEST_DIR = 'checkpoints'
BEST_DIR = 'checkpoints_best'


def _manager(directory: str, *, keep: int, async_save: bool,
             keep_best: bool = False) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      enable_async_checkpointing=async_save,
      create=True,
      best_fn=(lambda metrics: metrics['accuracy']) if keep_best else None,
      best_mode='max')
  return ocp.CheckpointManager(os.path.abspath(directory), options=options,
                               item_handlers=item_handlers())


def item_handlers() -> dict:
  """How each item of a checkpoint is stored; lets metadata be read alone."""
  return {'state': ocp.StandardCheckpointHandler(),
          'meta': ocp.JsonCheckpointHandler()}


def path_str(path) -> str:
  """'params/head/kernel' for a jax key path."""
  return '/'.join(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k))))
                  for k in path)


def flatten(tree) -> dict:
  """{'params/head/kernel': leaf} for every leaf of `tree`."""
  return {path_str(p): v for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def check_shapes(saved, expected, source: str) -> None:
  """UsageError naming the first array whose saved shape is not the expected."""
  saved, expected = flatten(saved), flatten(expected)
  for path, want in expected.items():
    have = saved.get(path)
    if have is None or tuple(have.shape) != tuple(want.shape):
      found = 'absent' if have is None else tuple(have.shape)
      raise UsageError(f'{source}: {path} has shape {found} in the checkpoint but '
                       f'{tuple(want.shape)} in this run')


class Checkpointer:
  """The work dir's checkpoints: the last `keep` and optionally the best."""

  def __init__(self, workdir: str, *, keep: int = 3, async_save: bool = True,
               keep_best: bool = False):
    self._latest = _manager(os.path.join(workdir, LATEST_DIR), keep=keep,
                            async_save=async_save)
    self._best = (_manager(os.path.join(workdir, BEST_DIR), keep=1,
                           async_save=async_save, keep_best=True)
                  if keep_best else None)
    self._best_accuracy = -1.0

  def latest_step(self) -> int | None:
    return self._latest.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._latest.all_steps())

  def save(self, step: int, state, meta: dict) -> None:
    """Starts writing `state` as checkpoint `step` (returns before it ends)."""
    if step in self._latest.all_steps():
      return
    logging.info('Saving checkpoint %d', step)
    self._latest.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
                      force=True)

  def save_if_best(self, step: int, state, meta: dict, accuracy: float) -> None:
    if self._best is None or accuracy <= self._best_accuracy:
      return
    self._best_accuracy = accuracy
    self._best.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
                    metrics={'accuracy': accuracy}, force=True)

  def restore(self, step: int, abstract_state):
    """(state, meta) of checkpoint `step`, laid out as `abstract_state` says."""
    check_shapes(self._latest.item_metadata(step)['state'], abstract_state,
                 f'checkpoint {step} in {self._latest.directory}')
    restored = self._latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        meta=ocp.args.JsonRestore()))
    logging.info('Restored checkpoint %d from %s', step, self._latest.directory)
    return restored['state'], restored['meta']

  def wait(self) -> None:
    """Blocks until every started save is on disk."""
    self._latest.wait_until_finished()
    if self._best is not None:
      self._best.wait_until_finished()

  def close(self) -> None:
    self.wait()
    self._latest.close()
    if self._best is not None:
      self._best.close()
