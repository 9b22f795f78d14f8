"""Checkpoints with orbax: asynchronous, atomic, keep-N, best-by-accuracy.

A checkpoint holds the TrainState and a small JSON record (the step, which is
also the data position, since the training stream is a pure function of
(seed, step); plus the eval accuracy when known). Orbax writes each step into
a temporary directory and renames it when complete, so an interrupted save is
never mistaken for a checkpoint. Restoring takes the abstract state with the
*current* mesh's shardings, so a checkpoint written on one mesh or device
count restores onto another. Evaluation and fine-tuning restore the weights
alone (`restore_weights`): the optimiser state, twice the parameters' bytes
with AdamW, is never read.
"""

import contextlib
import errno
import math
import os

from absl import logging
import jax
import orbax.checkpoint as ocp

from core.errors import RunFailure, UsageError
from trainer import optim
from trainer.tree_paths import leaves_by_path, path_str, tree_from_paths

LATEST_DIR = 'checkpoints'
BEST_DIR = 'checkpoints_best'


def _write_replicated_arrays_whole() -> None:
  """Saves each replicated array as one write, where one process owns them all.

  Orbax's default splits a replicated array among its replicas so that each
  host writes a part. Within one process that buys nothing and costs a jitted
  slice per (array, replica): 104 compilations, 5 s, on the first save of a
  tiny ResNet-18 on 8 CPU devices. With several processes the split still
  spreads the writing over hosts, so it stays.
  """
  ocp.type_handlers.register_type_handler(
      jax.Array,
      ocp.type_handlers.ArrayHandler(use_replica_parallel=jax.process_count() > 1),
      override=True)


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


@contextlib.contextmanager
def _reader(directory: str, item_handlers_: dict | None = None, **options):
  """A manager of `directory` that only reads: create=False and no save
  write nothing (--mode=eval may run beside the training that writes)."""
  manager = ocp.CheckpointManager(
      os.path.abspath(directory),
      options=ocp.CheckpointManagerOptions(create=False, **options),
      item_handlers=item_handlers_ or item_handlers())
  try:
    yield manager
  finally:
    manager.close()


def all_steps(workdir: str) -> list[int]:
  """The steps of the work dir's complete checkpoints, in order, without
  writing anything (--mode=eval may run beside the training that writes
  them)."""
  directory = os.path.join(workdir, LATEST_DIR)
  if not os.path.isdir(directory):
    return []
  with _reader(directory) as manager:
    return sorted(manager.all_steps())


def latest_step(workdir: str) -> int | None:
  """The work dir's latest complete checkpoint, without creating anything."""
  steps = all_steps(workdir)
  return steps[-1] if steps else None


def best_steps(workdir: str) -> list[int]:
  """The steps in the work dir's checkpoints_best/, best (by eval top-1)
  last; [] when there is none. Creates nothing."""
  directory = os.path.join(workdir, BEST_DIR)
  if not os.path.isdir(directory):
    return []
  with _reader(directory, best_fn=lambda metrics: metrics['accuracy'],
               best_mode='max') as manager:
    steps = list(manager.all_steps())
    best = manager.best_step()
  return sorted(s for s in steps if s != best) + ([best] if best is not None else [])


def restore_weights(directory: str, step: int, abstract_state):
  """`abstract_state` with the step, parameters and batch statistics of
  checkpoint `step` in `directory` (on their shardings) and opt_state=None:
  what evaluation needs, without reading the optimiser state."""
  weights = {'step': abstract_state.step, 'params': abstract_state.params,
             'batch_stats': abstract_state.batch_stats}
  with _reader(directory) as manager:
    saved = manager.item_metadata(step)['state']
  check_shapes(saved, weights, f'checkpoint {step} in {directory}')
  restored = restore_subset(directory, step, _without_empty(weights))
  logging.info('Restored the weights of checkpoint %d from %s', step, directory)
  return abstract_state.replace(step=restored['step'], params=restored['params'],
                                batch_stats=restored.get('batch_stats', {}),
                                opt_state=None)


def saved_leaves(directory: str, step: int) -> dict:
  """{'params/head/bias': its metadata (shape, dtype)} for every array that
  checkpoint `step` in `directory` holds; reads no array."""
  with _reader(directory) as manager:
    return leaves_by_path(manager.item_metadata(step)['state'])


def restore_ema(directory: str, step: int, abstract_opt_state, abstract_params):
  """The moving average of the parameters (trainer/optim.py: ParamsEma) that
  checkpoint `step` keeps in its optimiser state, read straight onto the
  parameters' layout (`abstract_params`); nothing else of the optimiser
  state is read (orbax's PLACEHOLDER: the saved optimiser state is a list,
  from which a partial restore cannot leave entries out)."""
  prefix = f'opt_state/{optim.ema_path(abstract_opt_state)}/ema/'
  params = leaves_by_path(abstract_params)
  with _reader(directory) as manager:
    saved = {'opt_state': manager.item_metadata(step)['state']['opt_state']}
  averaged = {p[len(prefix):] for p in leaves_by_path(saved) if p.startswith(prefix)}
  if averaged != set(params):
    raise UsageError(f'checkpoint {step} in {directory} keeps no moving average of '
                     'these parameters; evaluate with eval.weights=raw')

  def pick(path, _):
    name = path_str(path)
    return params[name[len(prefix):]] if name.startswith(prefix) else ocp.PLACEHOLDER
  restored = leaves_by_path(restore_subset(
      directory, step, jax.tree_util.tree_map_with_path(pick, saved)))
  logging.info('Restored the moving average of the weights of checkpoint %d from %s',
               step, directory)
  return tree_from_paths({q: restored[prefix + q] for q in params})


def restore_subset(directory: str, step: int, target: dict) -> dict:
  """The leaves of checkpoint `step` that `target` names, and no others.

  `target`: nested dicts of jax.ShapeDtypeStruct, a part of the saved state
  tree (e.g. {'params': ..., 'batch_stats': ...}); each array is read
  straight onto its sharding, so a device only ever holds its own shards.
  The saved tree's other leaves (the optimiser state) are not read at all.
  """
  # The PyTree handler reads what the Standard one wrote; only it restores a
  # part of a tree.
  with _reader(directory, {'state': ocp.PyTreeCheckpointHandler()}) as manager:
    return manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=True)))['state']


def check_shapes(saved, expected, source: str) -> None:
  """UsageError naming the first array whose saved shape is not the expected."""
  saved, expected = leaves_by_path(saved), leaves_by_path(expected)
  for path, want in expected.items():
    have = saved.get(path)
    if have is None or tuple(have.shape) != tuple(want.shape):
      found = 'absent' if have is None else tuple(have.shape)
      raise UsageError(f'{source}: {path} has shape {found} in the checkpoint but '
                       f'{tuple(want.shape)} in this run')


def _without_empty(tree: dict) -> dict:
  """`tree` less its empty sub-dicts (ViT has no batch statistics), which a
  partial restore cannot match."""
  return {k: v for k, v in tree.items() if not isinstance(v, dict) or jax.tree.leaves(v)}


def _save_args(state, meta: dict) -> ocp.args.Composite:
  return ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))


class Checkpointer:
  """The work dir's checkpoints: the last `keep` and optionally the best."""

  def __init__(self, workdir: str, *, keep: int = 3, async_save: bool = True,
               keep_best: bool = False):
    _write_replicated_arrays_whole()
    self._latest = _manager(os.path.join(workdir, LATEST_DIR), keep=keep,
                            async_save=async_save)
    self._best = (_manager(os.path.join(workdir, BEST_DIR), keep=1,
                           async_save=async_save, keep_best=True)
                  if keep_best else None)

  def latest_step(self) -> int | None:
    return self._latest.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._latest.all_steps())

  def save(self, step: int, state, meta: dict) -> None:
    """Starts writing `state` as checkpoint `step` (returns before it ends)."""
    if step in self._latest.all_steps():
      return
    logging.info('Saving checkpoint %d', step)
    self._latest.save(step, args=_save_args(state, meta), force=True)

  def save_if_best(self, step: int, state, meta: dict, accuracy: float) -> None:
    """Also writes checkpoint `step` into checkpoints_best/ if its accuracy
    beats the best one kept there (by this run or an earlier one)."""
    # A run killed after writing the best copy of a step but before its
    # latest copy resumes before that step and reaches it again.
    if self._best is None or step in self._best.all_steps():
      return
    if accuracy <= self._best_accuracy():  # the first of equals stays
      return
    self._best.save(step, args=_save_args(state, meta),
                    metrics={'accuracy': accuracy}, force=True)

  def _best_accuracy(self) -> float:
    """The accuracy of the checkpoint that orbax keeps as the best; -inf if
    none. Orbax reads it from the checkpoint, so it holds across runs."""
    self._best.wait_until_finished()  # a save in flight has no metrics on disk yet
    best = self._best.best_step()
    metrics = self._best.metrics(best) if best is not None else None
    return -math.inf if metrics is None else metrics['accuracy']

  def restore(self, step: int, abstract_state):
    """(state, meta) of checkpoint `step`, laid out as `abstract_state` says."""
    check_shapes(self._latest.item_metadata(step)['state'], abstract_state,
                 f'checkpoint {step} in {self._latest.directory}')
    restored = self._latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        meta=ocp.args.JsonRestore()))
    logging.info('Restored checkpoint %d from %s', step, self._latest.directory)
    return restored['state'], restored['meta']

  def restore_weights(self, step: int, abstract_state):
    """See the module's `restore_weights`; from the latest checkpoints."""
    return restore_weights(self._latest.directory, step, abstract_state)

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


# --- A full disk ---------------------------------------------------------------
# A save that runs out of space leaves the last complete checkpoint as it
# was (a save is committed only when whole); the run ends with one line that
# says so and how to go on.

_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# How tensorstore (the checkpoints' writer) reports them: in its message only.
_NO_SPACE = os.strerror(errno.ENOSPC)  # 'No space left on device'
_FILE_TOO_LARGE = os.strerror(errno.EFBIG)  # 'File too large': ulimit -f


def _causes(error: BaseException):
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def disk_full_cause(error: BaseException) -> str | None:
  """What filled up ('No space left on device', 'File too large', ...) when
  `error` or one of its causes is a full disk, quota or file size limit;
  None otherwise."""
  for e in _causes(error):
    if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
      return e.strerror or str(e)
    for message in (_NO_SPACE, _FILE_TOO_LARGE):
      if message in str(e):
        return message
  return None


def disk_full_failure(error: BaseException, workdir: str) -> RunFailure | None:
  """The one-line failure for a run that filled its disk (or hit its quota
  or file size limit) while writing to `workdir`; None for other errors."""
  cause = disk_full_cause(error)
  if cause is None:
    return None
  what, remedy = (('the file size limit reached', 'raise it (ulimit -f)')
                  if cause == _FILE_TOO_LARGE else ('disk full', 'free space'))
  return RunFailure(
      f'{what} while writing to {workdir} ({cause}); the last complete '
      f'checkpoint (step {latest_step(workdir)}) is intact: {remedy} and rerun '
      'the same command to resume')

