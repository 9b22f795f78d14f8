"""Batch norm whose batch statistics come from groups of G examples.

Under `jit` a plain BatchNorm normalises over the whole global batch, however
many devices it is split over. Large-batch ImageNet training (Goyal et al.
2017: 32 examples per worker) and the parameter-server engine normalise over
each worker's slice instead. `group_size=G` reproduces that in one SPMD
program: the batch is cut into consecutive groups of G examples, each group
is normalised with its own mean and variance, and the running statistics move
towards the mean over groups of those means and variances. That is exactly
the average of what independent workers of G examples each would compute,
which is how the parameter-server engine combines its workers' statistics.

`batch_norm(group_size=0)` is flax's `nn.BatchNorm`, unchanged. The variables have the
same names and shapes either way (params `scale`, `bias`; batch_stats `mean`,
`var`), and the class keeps flax's name so auto-named layers are called
`BatchNorm_N` in both, so a checkpoint restores whichever G a run uses.
"""

from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp


def batch_norm(*, train: bool, group_size: int = 0, **kwargs) -> nn.Module:
  """flax's nn.BatchNorm, or the grouped one below when group_size > 0.

  kwargs are nn.BatchNorm's: momentum, epsilon, dtype, param_dtype,
  scale_init, bias_init, name.
  """
  if group_size == 0:
    return nn.BatchNorm(use_running_average=not train, **kwargs)
  return BatchNorm(use_running_average=not train, group_size=group_size, **kwargs)


class BatchNorm(nn.Module):
  """nn.BatchNorm (over the last axis) with statistics over groups of G examples."""
  use_running_average: bool
  group_size: int  # examples per statistics group
  momentum: float = 0.9
  epsilon: float = 1e-5
  dtype: Any = None
  param_dtype: Any = jnp.float32
  scale_init: Callable = nn.initializers.ones
  bias_init: Callable = nn.initializers.zeros

  @nn.compact
  def __call__(self, x):
    features = x.shape[-1]
    ra_mean = self.variable('batch_stats', 'mean',
                            lambda: jnp.zeros((features,), jnp.float32))
    ra_var = self.variable('batch_stats', 'var',
                           lambda: jnp.ones((features,), jnp.float32))
    scale = self.param('scale', self.scale_init, (features,), self.param_dtype)
    bias = self.param('bias', self.bias_init, (features,), self.param_dtype)

    if self.use_running_average:
      mean, var = ra_mean.value, ra_var.value
      y = (x - mean) * (jnp.reciprocal(jnp.sqrt(var + self.epsilon)) * scale) + bias
      return jnp.asarray(y, self.dtype or x.dtype)

    g = self.group_size
    if x.shape[0] % g:
      raise ValueError(f'a batch of {x.shape[0]} does not split into groups of '
                       f'{g} for batch-norm statistics')
    # Statistics in float32, as flax computes them ("fast variance").
    groups = x.astype(jnp.float32).reshape(-1, g, *x.shape[1:])
    axes = tuple(range(1, groups.ndim - 1))
    mean = groups.mean(axis=axes, keepdims=True)
    mean_sq = jnp.square(groups).mean(axis=axes, keepdims=True)
    var = jnp.maximum(0.0, mean_sq - jnp.square(mean))
    y = (groups - mean) * (jnp.reciprocal(jnp.sqrt(var + self.epsilon)) * scale) + bias
    if not self.is_initializing():
      m = self.momentum
      ra_mean.value = m * ra_mean.value + (1 - m) * mean.reshape(-1, features).mean(0)
      ra_var.value = m * ra_var.value + (1 - m) * var.reshape(-1, features).mean(0)
    return jnp.asarray(y.reshape(x.shape), self.dtype or x.dtype)
