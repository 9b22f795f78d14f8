"""Starting a run from another run's checkpoint (fine-tuning).

The source checkpoint's metadata says each array's shape; parameters and
batch statistics whose path and shape match this run's are restored onto
this run's shardings (any mesh), everything else keeps its fresh
initialisation only where that is asked for: the classifier head, when
`init.reset_head` is set, so that a model trained on one set of classes can be
fine-tuned on another. Any other mismatch is an error naming the parameter
path and both shapes. Optimiser state and the step start afresh: only the
arrays taken are read from the source, each straight onto its sharding here
(the source's optimiser state, twice its parameters with AdamW, is never
read).

The source is read only to start a run: once the run has a checkpoint of its
own, resuming it needs neither init.* nor the source work dir
(trainer/train.py).
"""

import os

from absl import logging
import jax
import orbax.checkpoint as ocp

from core.errors import UsageError
from trainer import checkpointing
from trainer import optim
from trainer import tree_paths

HEAD_PREFIX = 'head/'  # the classifier of every model in models/


def source_directory(init_from: str) -> str:
  """The checkpoints folder of `init_from` (a work dir or its checkpoints/)."""
  path = os.path.abspath(os.path.expanduser(init_from))
  nested = os.path.join(path, checkpointing.LATEST_DIR)
  return nested if os.path.isdir(nested) else path


def _plan(state, init_config, step: int | None = None):
  """What to restore from where; UsageError if the checkpoint does not fit.

  `state` may be abstract (shapes and shardings only). `step`: the source
  checkpoint, if already chosen; else init.checkpoint_step's.
  """
  directory = source_directory(init_config.from_workdir)
  if not os.path.isdir(directory):
    raise UsageError(f'init.from_workdir={init_config.from_workdir!r}: no such '
                     "directory; give another run's work dir")
  manager = ocp.CheckpointManager(
      directory, options=ocp.CheckpointManagerOptions(create=False),
      item_handlers=checkpointing.item_handlers())
  try:
    steps = list(manager.all_steps())
    if not steps:
      raise UsageError(f'init.from_workdir={init_config.from_workdir}: no checkpoint '
                       f'in {directory}')
    if step is None:
      step = init_config.checkpoint_step if init_config.checkpoint_step >= 0 else max(steps)
    if step not in steps:
      raise UsageError(f'init.checkpoint_step={step}: not in {directory}; available: '
                       f'{", ".join(map(str, sorted(steps)))}')
    source = manager.item_metadata(step)['state']
  finally:
    manager.close()

  ours = tree_paths.leaves_by_path({'params': state.params, 'batch_stats': state.batch_stats})
  theirs = tree_paths.leaves_by_path({'params': source['params'], 'batch_stats': source['batch_stats']})
  target = {}
  for path, meta in theirs.items():
    mine = ours.get(path)
    if mine is not None and tuple(mine.shape) == tuple(meta.shape):
      target[path] = jax.ShapeDtypeStruct(mine.shape, mine.dtype, sharding=mine.sharding)
    elif init_config.reset_head and path.startswith('params/' + HEAD_PREFIX):
      continue  # keeps its fresh initialisation
    else:
      mine_shape = 'absent' if mine is None else tuple(mine.shape)
      hint = (' (a different number of classes? set init.reset_head=true)'
              if path.startswith('params/' + HEAD_PREFIX) else '')
      raise UsageError(f'init.from_workdir: parameter {path} has shape '
                       f'{tuple(meta.shape)} in the checkpoint but {mine_shape} in '
                       f'this model{hint}')
  missing = sorted(set(ours) - set(theirs))
  if missing:
    raise UsageError(f'init.from_workdir: this model has parameters the '
                     f'checkpoint lacks, e.g. {missing[0]}')
  return directory, step, target, ours


def check(abstract_state, init_config) -> int:
  """Validates init.* against this run's state before anything is written;
  returns the source checkpoint's step."""
  return _plan(abstract_state, init_config)[1]


def initialize_from(state, init_config, step: int | None = None):
  """`state` with parameters and batch statistics taken from the source run
  (from its checkpoint `step`, if given: the one `check` chose)."""
  directory, step, target, ours = _plan(state, init_config, step)
  loaded = tree_paths.leaves_by_path(
      checkpointing.restore_subset(directory, step, tree_paths.tree_from_paths(target)))

  def pick(path, fresh):
    return loaded.get(tree_paths.path_str(path), fresh)
  new = jax.tree_util.tree_map_with_path(
      pick, {'params': state.params, 'batch_stats': state.batch_stats})
  kept_fresh = sorted(set(ours) - set(target))
  logging.info('Initialised from %s step %d: %d arrays restored, fresh: %s',
               directory, step, len(target), ', '.join(kept_fresh) or 'none')
  # A moving average of the weights starts at the weights the run starts
  # from, not at the fresh initialisation the optimiser state was made with.
  return state.replace(params=new['params'], batch_stats=new['batch_stats'],
                       opt_state=optim.with_ema_of(state.opt_state, new['params']))
