"""TrainState <-> what each server shard holds.

Checkpoints keep the SPMD engine's format, so a PS run restores under SPMD
and the other way round. A shard holds its pieces (partition.py) of the
parameters and batch statistics as flat dicts {piece key: array}, and an
optimiser state made by the same optax transformation for that dict: every
sub-tree of the optimiser state shaped like the parameters (momentum, Adam's
moments) becomes the same dict of pieces, and scalars (step counts) are
copied to every shard.

optax's step counts are the leaves named `count` (ScaleByScheduleState,
ScaleByAdamState, ...); `counts` and `with_counts` read and set them by that
name, so no other integer of an optimiser state is taken for one.
"""

import jax
import numpy as np

from trainer.engines.emulation.wire import PARAMS
from trainer.tree_paths import path_str

# The checkpoint metadata key of the asynchronous shards' exact step counts.
ASYNC_COUNTS_KEY = 'ps_async_optimizer_counts'


def _is_params_like(treedef):
  return lambda node: (not isinstance(node, (np.ndarray, jax.Array)) and
                       jax.tree.structure(node) == treedef)


def split(tree, prefix: str, pieces) -> dict:
  """{piece key: rows} of the pieces of `tree` (a params- or stats-shaped tree)."""
  flat = {f'{prefix}/{path_str(p)}': leaf
          for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}
  return {p.key: np.array(p.of(np.asarray(flat[p.path])))
          for p in pieces if p.path.startswith(prefix + '/')}


def split_opt_state(opt_state, params_treedef, pieces):
  """A shard's optimiser state from the whole one (host arrays)."""
  return jax.tree.map(
      lambda node: (split(node, PARAMS, pieces) if _is_params_like(params_treedef)(node)
                    else np.asarray(node)),
      opt_state, is_leaf=_is_params_like(params_treedef))


def assemble(template, prefix: str, shard_dicts, shard_pieces):
  """The whole `template`-shaped tree from the shards' piece dicts."""
  rows = {}
  for pieces, values in zip(shard_pieces, shard_dicts):
    for p in pieces:
      if p.path.startswith(prefix + '/'):
        rows.setdefault(p.path, []).append((p.start, np.asarray(values[p.key])))
  leaves = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(template)[0]:
    parts = [a for _, a in sorted(rows[f'{prefix}/{path_str(path)}'],
                                  key=lambda sa: sa[0])]
    leaves.append(parts[0] if not np.ndim(leaf) else np.concatenate(parts))
  return jax.tree.unflatten(jax.tree.structure(template), leaves)


def assemble_opt_state(template, params_template, shard_states, shard_pieces):
  """The whole optimiser state from the shards' states; scalars (optax's
  step counts) from shard 0, as every shard applies every update."""
  treedef = jax.tree.structure(params_template)
  is_params_like = _is_params_like(treedef)
  nodes, outer = jax.tree.flatten(template, is_leaf=is_params_like)
  shard_keys = [{p.key for p in pieces if p.path.startswith(PARAMS + '/')}
                for pieces in shard_pieces]
  shard_nodes = [
      jax.tree.flatten(state, is_leaf=lambda n, keys=keys: (
          isinstance(n, dict) and set(n) == keys))[0]
      for state, keys in zip(shard_states, shard_keys)]
  merged = []
  for k, node in enumerate(nodes):
    if is_params_like(node):
      merged.append(assemble(params_template, PARAMS,
                             [s[k] for s in shard_nodes], shard_pieces))
    else:
      merged.append(np.asarray(shard_nodes[0][k]))
  return jax.tree.unflatten(outer, merged)


def _is_count(path) -> bool:
  return bool(path) and getattr(path[-1], 'name', None) == 'count'


def counts(opt_state) -> dict:
  """{path: int} of optax's step counts in `opt_state`."""
  return {jax.tree_util.keystr(path): int(np.asarray(leaf))
          for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]
          if _is_count(path)}


def with_counts(opt_state, new_counts: dict):
  """`opt_state` with each step count set to new_counts[its path] (host arrays)."""
  def replace(path, leaf):
    if not _is_count(path):
      return leaf
    return np.asarray(new_counts[jax.tree_util.keystr(path)], np.asarray(leaf).dtype)
  return jax.tree_util.tree_map_with_path(replace, opt_state)


# --- Asynchronous step counts ---------------------------------------------------
# Asynchronous shards count one optax update per applied gradient: N_w per
# global step, fewer when nonfinite=skip drops some. A checkpoint's state
# holds the count in global steps (rounded down), which the SPMD engine reads
# as its own; its metadata holds the exact counts and N_w.

def async_counts_meta(shard_counts: dict, num_workers: int) -> dict:
  """Checkpoint metadata with the asynchronous shards' exact counts."""
  return {ASYNC_COUNTS_KEY: {'num_workers': num_workers, 'counts': dict(shard_counts)}}


def async_counts(opt_state, meta: dict | None, num_workers: int) -> dict:
  """The asynchronous shards' counts for `opt_state`, whose counts are in
  global steps: the exact ones in its checkpoint's metadata (scaled if N_w
  changed), else N_w per step (a checkpoint of the SPMD or synchronous
  engine, or a fresh state)."""
  in_steps = counts(opt_state)
  saved = (meta or {}).get(ASYNC_COUNTS_KEY)
  # Used only when they belong to this state: its counts are theirs in rounds.
  if saved and set(saved['counts']) == set(in_steps) and all(
      int(c) // saved['num_workers'] == in_steps[path]
      for path, c in saved['counts'].items()):
    return {path: int(c) * num_workers // saved['num_workers']
            for path, c in saved['counts'].items()}
  return {path: c * num_workers for path, c in in_steps.items()}
