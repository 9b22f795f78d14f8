"""Stochastic depth (Huang et al. 2016): a residual branch dropped per example."""

import flax.linen as nn
import jax
import jax.numpy as jnp


def linear_rates(rate: float, num_blocks: int) -> list[float]:
  """Block i of n drops with rate * i / (n - 1): none at the first block, the
  full rate at the last (timm's and DeiT's linear rule)."""
  if num_blocks <= 1:
    return [rate] * num_blocks
  return [rate * i / (num_blocks - 1) for i in range(num_blocks)]


class DropPath(nn.Module):
  """Zeroes the branch of each example with probability `rate` and scales the
  kept ones by 1 / (1 - rate), so the expectation is unchanged; the identity
  when `deterministic` (evaluation) or at rate 0. Draws from the 'dropout'
  stream that the train step seeds from its seed and step."""
  rate: float

  @nn.compact
  def __call__(self, x, deterministic: bool):
    if deterministic or self.rate == 0.0:
      return x
    keep = 1.0 - self.rate
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    kept = jax.random.bernoulli(self.make_rng('dropout'), keep, shape)
    return jnp.where(kept, x / jnp.asarray(keep, x.dtype), jnp.zeros((), x.dtype))
