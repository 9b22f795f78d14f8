"""Names of a pytree's leaves by their key paths ('params/head/kernel').

Checkpoints, the emulated engines' wire format and the parameter servers'
state split all name leaves this way; this module imports nothing of the
trainer, so each of them can import it without importing the others.
"""

from flax import traverse_util
import jax


def path_str(path) -> str:
  """'params/head/kernel' for a jax key path."""
  return jax.tree_util.keystr(path, simple=True, separator='/')


def leaves_by_path(tree) -> dict:
  """{'params/head/kernel': leaf} for every leaf of `tree`."""
  return {path_str(p): v for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def tree_from_paths(flat: dict) -> dict:
  """The nested dicts of `leaves_by_path`'s output (for trees of dicts)."""
  return traverse_util.unflatten_dict(flat, sep='/')
