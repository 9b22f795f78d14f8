"""TrainState <-> what each server shard holds.

Checkpoints keep the SPMD engine's format, so a PS run restores under SPMD
and the other way round. A shard holds its pieces (partition.py) of the
parameters and batch statistics as flat dicts {piece key: array}, and an
optimiser state made by the same optax transformation for that dict: every
sub-tree of the optimiser state shaped like the parameters (momentum, Adam's
moments) becomes the same dict of pieces, and scalars (step counts) are
copied to every shard.
"""

import jax
import numpy as np

from trainer.checkpointing import path_str

PARAMS, STATS = 'params', 'batch_stats'


def flat_variables(params, batch_stats) -> dict:
  """{'params/a/b/kernel': leaf, 'batch_stats/...': leaf} in tree order."""
  flat = {}
  for prefix, tree in ((PARAMS, params), (STATS, batch_stats)):
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
      flat[f'{prefix}/{path_str(path)}'] = leaf
  return flat


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


def assemble_opt_state(template, params_template, shard_states, shard_pieces,
                       count_divisor: int = 1):
  """The whole optimiser state from the shards' states.

  Scalars come from shard 0; integer scalars (optax's step counts) are
  divided by `count_divisor` (the asynchronous mode counts one step per
  worker gradient, a checkpoint one per global step).
  """
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
      value = np.asarray(shard_nodes[0][k])
      if np.issubdtype(value.dtype, np.integer) and count_divisor > 1:
        value = value // count_divisor
      merged.append(value)
  return jax.tree.unflatten(outer, merged)


def scale_counts(opt_state, factor: int):
  """Integer scalars (step counts) times `factor`: the inverse of the above."""
  return jax.tree.map(
      lambda x: x * factor if np.issubdtype(np.asarray(x).dtype, np.integer)
      and not np.ndim(x) else x, opt_state)
