"""ResNet v1.5 (He et al. 2016; stride on the 3x3 conv of the bottleneck).

The layout follows torchvision's `resnet*` (which is v1.5), so the parameter
counts match the published ones (resnet50: 25,557,032 at 1000 classes).
Every parameter carries logical axis names only; the trainer's rules map them
to mesh axes:

  conv kernel (kh, kw, in, out)  -> (None, None, 'conv_in', 'conv_out')
                                    (stem: (None, None, None, 'conv_out'))
  BatchNorm scale / bias         -> ('conv_out',)
  classifier kernel / bias       -> ('conv_out', 'classes') / ('classes',)
"""

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp

from models import batch_norm as batch_norm_lib
from models import conv_forms
from models import drop_path as drop_path_lib
from models import remat as remat_lib

# He et al. (2015) init for ReLU networks, fan_out as in torchvision.
_CONV_INIT = nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')
# Activations are pinned to batch sharding only. The channel axis is left to
# XLA: naming it 'conv_out' would collide with a rule that shards parameters'
# 'conv_out' over the same mesh axis as 'batch' (FSDP).
_ACTIVATION_AXES = ('batch', None, None, None)


def _conv(features: int, kernel: int, strides: int, dtype: Any,
          name: str | None = None, in_axis: str | None = 'conv_in',
          conv_form: str = 'xla') -> nn.Conv:
  """A bias-free conv with symmetric (torchvision) padding, computed in
  `conv_form` (models/conv_forms.py)."""
  pad = kernel // 2
  return nn.Conv(
      features, (kernel, kernel), strides=(strides, strides),
      padding=((pad, pad), (pad, pad)), use_bias=False, dtype=dtype,
      param_dtype=jnp.float32,
      kernel_init=nn.with_logical_partitioning(
          _CONV_INIT, (None, None, in_axis, 'conv_out')),
      conv_general_dilated=conv_forms.conv_function(conv_form), name=name)


def _batch_norm(train: bool, dtype: Any, group_size: int, zero_init: bool = False,
                name: str | None = None) -> nn.Module:
  """BatchNorm with running statistics in the 'batch_stats' collection;
  statistics over groups of `group_size` examples when > 0 (models/batch_norm.py)."""
  scale_init = nn.initializers.zeros if zero_init else nn.initializers.ones
  return batch_norm_lib.batch_norm(
      train=train, group_size=group_size, momentum=0.9, epsilon=1e-5, dtype=dtype,
      param_dtype=jnp.float32,
      scale_init=nn.with_logical_partitioning(scale_init, ('conv_out',)),
      bias_init=nn.with_logical_partitioning(
          nn.initializers.zeros, ('conv_out',)),
      name=name)


def _shortcut(x, y, strides: int, train: bool, dtype: Any, bn_group_size: int,
              conv_form: str):
  """Identity, or a strided 1x1 projection when the shape changes."""
  if x.shape == y.shape:
    return x
  x = _conv(y.shape[-1], 1, strides, dtype, name='proj_conv', conv_form=conv_form)(x)
  return _batch_norm(train, dtype, bn_group_size, name='proj_bn')(x)


class BasicBlock(nn.Module):
  """Two 3x3 convs (resnet18/34)."""
  filters: int
  strides: int = 1
  dtype: Any = jnp.float32
  bn_group_size: int = 0
  conv_form: str = 'xla'
  drop_path: float = 0.0  # stochastic depth of the residual branch

  @nn.compact
  def __call__(self, x, train: bool):
    y = _conv(self.filters, 3, self.strides, self.dtype, conv_form=self.conv_form)(x)
    y = nn.relu(_batch_norm(train, self.dtype, self.bn_group_size)(y))
    y = _conv(self.filters, 3, 1, self.dtype, conv_form=self.conv_form)(y)
    # Zero-init of the last scale makes each block start as the identity,
    # which lets large batches train stably (Goyal et al. 2017).
    y = _batch_norm(train, self.dtype, self.bn_group_size, zero_init=True)(y)
    y = drop_path_lib.DropPath(self.drop_path)(y, deterministic=not train)
    return nn.relu(_shortcut(x, y, self.strides, train, self.dtype, self.bn_group_size,
                             self.conv_form) + y)


class Bottleneck(nn.Module):
  """1x1 reduce, 3x3 (strided: v1.5), 1x1 expand by 4 (resnet50 and up)."""
  filters: int
  strides: int = 1
  dtype: Any = jnp.float32
  bn_group_size: int = 0
  conv_form: str = 'xla'
  drop_path: float = 0.0  # stochastic depth of the residual branch

  @nn.compact
  def __call__(self, x, train: bool):
    y = _conv(self.filters, 1, 1, self.dtype, conv_form=self.conv_form)(x)
    y = nn.relu(_batch_norm(train, self.dtype, self.bn_group_size)(y))
    y = _conv(self.filters, 3, self.strides, self.dtype, conv_form=self.conv_form)(y)
    y = nn.relu(_batch_norm(train, self.dtype, self.bn_group_size)(y))
    y = _conv(self.filters * 4, 1, 1, self.dtype, conv_form=self.conv_form)(y)
    y = _batch_norm(train, self.dtype, self.bn_group_size, zero_init=True)(y)
    y = drop_path_lib.DropPath(self.drop_path)(y, deterministic=not train)
    return nn.relu(_shortcut(x, y, self.strides, train, self.dtype, self.bn_group_size,
                             self.conv_form) + y)


class ResNet(nn.Module):
  """ResNet v1.5 with an ImageNet stem; returns float32 logits.

  Attributes:
    stage_sizes: blocks per stage, e.g. (3, 4, 6, 3) for resnet50.
    block_cls: BasicBlock or Bottleneck.
    num_classes: classifier outputs.
    width: channels of the stem and first stage (64 = published); stage i
      has width * 2**i (times 4 at the output of a bottleneck).
    dtype: compute dtype; parameters are always float32.
    remat: 'none', 'full' or 'dots' (models/remat.py): what each block
      recomputes in the backward pass.
    bn_group_size: batch-norm statistics over groups of this many examples;
      0: over the whole batch (models/batch_norm.py).
    conv_form: how convolutions are computed (models/conv_forms.py); the
      parameters and results do not depend on it.
    drop_path_rate: stochastic depth of the last block; block i of n drops
      its residual branch with drop_path_rate * i / (n - 1) in training.
  """
  stage_sizes: Sequence[int]
  block_cls: Callable[..., nn.Module]
  num_classes: int
  width: int = 64
  dtype: Any = jnp.float32
  remat: str = 'none'
  bn_group_size: int = 0
  conv_form: str = 'xla'
  drop_path_rate: float = 0.0

  @nn.compact
  def __call__(self, x, *, train: bool):
    # `train` is a Python bool that selects code paths, so it must be static;
    # argnum 2 counts `self` as 0.
    block_cls = remat_lib.wrap(self.block_cls, self.remat, static_argnums=(2,))

    x = jnp.asarray(x, self.dtype)
    # The 3 RGB channels cannot be split across devices, so the stem's input
    # axis has no logical name (like the ViT patch embedding).
    x = _conv(self.width, 7, 2, self.dtype, name='stem_conv', in_axis=None,
              conv_form=self.conv_form)(x)
    x = nn.relu(_batch_norm(train, self.dtype, self.bn_group_size, name='stem_bn')(x))
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    x = nn.with_logical_constraint(x, _ACTIVATION_AXES)

    rates = iter(drop_path_lib.linear_rates(self.drop_path_rate, sum(self.stage_sizes)))
    for stage, num_blocks in enumerate(self.stage_sizes):
      for block in range(num_blocks):
        strides = 2 if stage > 0 and block == 0 else 1
        x = block_cls(
            filters=self.width * 2**stage, strides=strides, dtype=self.dtype,
            bn_group_size=self.bn_group_size, conv_form=self.conv_form,
            drop_path=next(rates), name=f'stage{stage + 1}_block{block + 1}')(x, train)
      x = nn.with_logical_constraint(x, _ACTIVATION_AXES)

    # Pool and classify in float32: the reduction and the logits are cheap
    # and lose accuracy in bfloat16.
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))
    return nn.Dense(
        self.num_classes, dtype=jnp.float32, param_dtype=jnp.float32,
        kernel_init=nn.with_logical_partitioning(
            nn.initializers.lecun_normal(), ('conv_out', 'classes')),
        bias_init=nn.with_logical_partitioning(
            nn.initializers.zeros, ('classes',)),
        name='head')(x)


STAGE_SIZES = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}


def resnet(depth: int, **kwargs) -> ResNet:
  """The published ResNet of this depth; kwargs override `ResNet` fields."""
  block_cls = BasicBlock if depth < 50 else Bottleneck
  return ResNet(**{'stage_sizes': STAGE_SIZES[depth], 'block_cls': block_cls,
                   **kwargs})

