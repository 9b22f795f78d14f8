"""One buffer per worker on the wire.

A worker's parameters and batch statistics travel as one float32 vector, and
its gradients and new statistics come back as another, laid out variable
after variable in `flat_variables` order (the names every emulated engine
and the planner share). The workers' program
unpacks and packs it on the device, so the host moves one array per worker
and direction instead of one per variable: with ResNet-18's hundred-odd
variables the per-variable host calls cost more than the bytes (real
parameter servers pack small tensors into one message for the same reason).
On the host, every variable and every shard's piece is a view into it.
Inside the program the vector is jax.flatten_util.ravel_pytree's, in
float32 whatever the model's dtypes.
"""

import math

import jax
from jax import flatten_util
import jax.numpy as jnp
import numpy as np

from trainer.tree_paths import path_str

DTYPE = np.float32
PARAMS, STATS = 'params', 'batch_stats'


def flat_variables(params, batch_stats) -> dict:
  """{'params/a/b/kernel': leaf, 'batch_stats/...': leaf} in tree order."""
  flat = {}
  for prefix, tree in ((PARAMS, params), (STATS, batch_stats)):
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
      flat[f'{prefix}/{path_str(path)}'] = leaf
  return flat


class Layout:
  """Where each variable lives in the flat vector."""

  def __init__(self, variables: dict):
    """variables: {path: object with shape and dtype}, in flat_variables order."""
    self.paths = list(variables)
    self.shapes = [tuple(v.shape) for v in variables.values()]
    self.dtypes = [np.dtype(v.dtype) for v in variables.values()]
    for path, dtype in zip(self.paths, self.dtypes):
      if not np.issubdtype(dtype, np.floating):
        raise ValueError(f'{path} is {dtype}: the PS engine sends floating-point '
                         'variables only')
    sizes = [math.prod(s) for s in self.shapes]
    self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    self.size = self.offsets[-1]
    self.num_params = sum(1 for p in self.paths if p.startswith(PARAMS + '/'))
    # The dtype ravel_pytree gives the variables' vector: their common one.
    self._raveled_dtype = jnp.result_type(*self.dtypes) if self.dtypes else DTYPE

  # --- On the host --------------------------------------------------------------
  def views(self, vector: np.ndarray) -> dict:
    """{path: view of the variable inside `vector`} (no copies)."""
    return {path: vector[a:b].reshape(shape) for path, shape, a, b in zip(
        self.paths, self.shapes, self.offsets, self.offsets[1:])}

  def empty(self) -> np.ndarray:
    return np.empty(self.size, DTYPE)

  def pack_host(self, params, batch_stats) -> np.ndarray:
    leaves = jax.tree.leaves((params, batch_stats))
    return np.concatenate([np.asarray(x, DTYPE).reshape(-1) for x in leaves])

  # --- Inside the workers' program ------------------------------------------------
  def pack(self, params, batch_stats) -> jax.Array:
    """The wire vector of two trees laid out as this layout's variables."""
    return flatten_util.ravel_pytree((params, batch_stats))[0].astype(DTYPE)

  def unpack(self, vector, params_treedef, stats_treedef):
    """(params, batch_stats) trees, each leaf in its own dtype."""
    leaves = [jax.ShapeDtypeStruct(shape, dtype)
              for shape, dtype in zip(self.shapes, self.dtypes)]
    unravel = _unravel_function((
        jax.tree.unflatten(params_treedef, leaves[:self.num_params]),
        jax.tree.unflatten(stats_treedef, leaves[self.num_params:])))
    # In the vector's own dtype, the inverse casts each leaf back to its dtype.
    return unravel(vector.astype(self._raveled_dtype))


def _unravel_function(template):
  """ravel_pytree's inverse for trees shaped like `template` (abstract
  leaves): traced without values, so no array is made."""
  found = []
  jax.eval_shape(lambda tree: found.append(flatten_util.ravel_pytree(tree)[1]),
                 template)
  return found[0]
