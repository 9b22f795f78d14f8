"""Rematerialisation modes: which activations a block keeps for the backward pass."""

from typing import Any

import flax.linen as nn
import jax

# none: keep everything (fastest, most memory); full: keep only the block's
# input and recompute the rest (least memory, about a third more compute);
# dots: keep matmul/conv outputs and recompute the cheap elementwise ops
# (most of full's saving on transformers for little extra compute).
POLICIES = {
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
MODES = ('none', *POLICIES)


def check_mode(remat: str) -> None:
  if remat not in MODES:
    raise ValueError(f'unknown remat {remat!r}; accepted: {", ".join(MODES)}')


def wrap(block_cls: Any, remat: str, static_argnums: tuple[int, ...] = ()) -> Any:
  """`block_cls` itself, or wrapped with nn.remat under the named policy."""
  check_mode(remat)
  if remat == 'none':
    return block_cls
  return nn.remat(block_cls, policy=POLICIES[remat], static_argnums=static_argnums)
