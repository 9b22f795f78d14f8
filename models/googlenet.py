"""GoogLeNet / Inception v1 (Szegedy et al. 2015) with batch norm, as
torchvision's `googlenet` builds it, without the auxiliary heads.

Every conv is torchvision's BasicConv2d: a conv without bias, BatchNorm
(epsilon 1e-3; torchvision's momentum 0.1 is flax's 0.9), ReLU. The inception
modules' third branch uses a 3x3 conv where the paper has a 5x5, as
torchvision does. Max-pools are torchvision's ceil_mode=True ones, emulated
with extra padding, so small inputs (32 px) work too. No transform_input.
6,624,904 parameters at 1000 classes.

No dropout: torchvision's Dropout(0.2) before the classifier is left out,
since the trainer passes no dropout rng. Batch norm still makes train and
eval differ. `remat` ('full' or 'dots', models/remat.py) recomputes each
inception module in the backward pass. `bn_group_size` > 0 takes batch-norm
statistics over groups of that many examples (models/batch_norm.py).

Initialisers as torchvision: N(0, 0.01) conv and classifier kernels (torch
truncates at +-2, i.e. 200 standard deviations: no truncation in effect),
BatchNorm scale 1 and bias 0, zero classifier bias.

Every parameter carries logical axis names only; the trainer's rules map them
to mesh axes:

  conv kernel (kh, kw, in, out)  -> (None, None, 'conv_in', 'conv_out')
                                    (first conv: (None, None, None, 'conv_out'))
  BatchNorm scale / bias         -> ('conv_out',)
  classifier kernel / bias       -> ('conv_out', 'classes') / ('classes',)
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from models import alexnet as alexnet_lib
from models import batch_norm as batch_norm_lib
from models import remat as remat_lib

_lp = nn.with_logical_partitioning
_INIT = nn.initializers.normal(stddev=0.01)

# torchvision's Inception(in, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5,
# pool_proj) arguments after `in`, by module name; 'pool' marks a max-pool.
LAYOUT = (
    ('inception3a', (64, 96, 128, 16, 32, 32)),
    ('inception3b', (128, 128, 192, 32, 96, 64)),
    ('pool', 3),
    ('inception4a', (192, 96, 208, 16, 48, 64)),
    ('inception4b', (160, 112, 224, 24, 64, 64)),
    ('inception4c', (128, 128, 256, 24, 64, 64)),
    ('inception4d', (112, 144, 288, 32, 64, 64)),
    ('inception4e', (256, 160, 320, 32, 128, 128)),
    ('pool', 2),
    ('inception5a', (256, 160, 320, 32, 128, 128)),
    ('inception5b', (384, 192, 384, 48, 128, 128)),
)


class BasicConv(nn.Module):
  """torchvision's BasicConv2d: conv (no bias), BatchNorm(eps=1e-3), ReLU."""
  features: int
  kernel: int
  strides: int = 1
  first: bool = False  # The network's first conv: RGB input.
  dtype: Any = jnp.float32
  bn_group_size: int = 0
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x, train: bool):
    x = alexnet_lib.conv(
        self.features, self.kernel, self.dtype, strides=self.strides,
        use_bias=False, in_axis=None if self.first else 'conv_in',
        kernel_init=_INIT, conv_form=self.conv_form, name='conv')(x)
    x = batch_norm_lib.batch_norm(
        train=train, group_size=self.bn_group_size, momentum=0.9,
        epsilon=1e-3, dtype=self.dtype, param_dtype=jnp.float32,
        scale_init=_lp(nn.initializers.ones, ('conv_out',)),
        bias_init=_lp(nn.initializers.zeros, ('conv_out',)), name='bn')(x)
    return nn.relu(x)


class Inception(nn.Module):
  """Four branches, concatenated on channels in torchvision's order: 1x1;
  1x1 -> 3x3; 1x1 -> 3x3 (the paper's 5x5); max-pool 3/1 -> 1x1."""
  ch1x1: int
  ch3x3red: int
  ch3x3: int
  ch5x5red: int
  ch5x5: int
  pool_proj: int
  dtype: Any = jnp.float32
  bn_group_size: int = 0
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x, train: bool):
    basic = lambda features, kernel, name: BasicConv(
        features, kernel, dtype=self.dtype, bn_group_size=self.bn_group_size,
        conv_form=self.conv_form, name=name)
    branch1 = basic(self.ch1x1, 1, 'branch1')(x, train)
    branch2 = basic(self.ch3x3red, 1, 'branch2_reduce')(x, train)
    branch2 = basic(self.ch3x3, 3, 'branch2')(branch2, train)
    branch3 = basic(self.ch5x5red, 1, 'branch3_reduce')(x, train)
    branch3 = basic(self.ch5x5, 3, 'branch3')(branch3, train)
    branch4 = alexnet_lib.max_pool(x, 3, 1, padding=1, ceil_mode=True)
    branch4 = basic(self.pool_proj, 1, 'branch4')(branch4, train)
    return jnp.concatenate([branch1, branch2, branch3, branch4], axis=-1)


class GoogLeNet(nn.Module):
  """GoogLeNet with batch norm, no auxiliary heads; returns float32 logits.

  Attributes:
    num_classes: classifier outputs.
    width: channels of the first conv (64 = published); every conv scales by
      width / 64 (at least one channel each).
    dtype: compute dtype; parameters are always float32. The final pooling
      and the logits are float32.
    remat: 'none', 'full' or 'dots' (models/remat.py): what each inception
      module recomputes in the backward pass.
    bn_group_size: batch-norm statistics over groups of this many examples;
      0: over the whole batch (models/batch_norm.py).
    conv_form: how convolutions are computed (models/conv_forms.py).
  """
  num_classes: int
  width: int = 64
  dtype: Any = jnp.float32
  remat: str = 'none'
  bn_group_size: int = 0
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x, *, train: bool):
    # `train` selects code paths, so it must be static; argnum 2 counts
    # `self` as 0.
    inception_cls = remat_lib.wrap(Inception, self.remat, static_argnums=(2,))
    c = lambda channels: alexnet_lib.scaled(channels, self.width)
    basic = lambda features, kernel, name, **kw: BasicConv(
        c(features), kernel, dtype=self.dtype,
        bn_group_size=self.bn_group_size, conv_form=self.conv_form, name=name,
        **kw)

    x = jnp.asarray(x, self.dtype)
    x = basic(64, 7, 'conv1', strides=2, first=True)(x, train)
    x = alexnet_lib.max_pool(x, 3, 2, ceil_mode=True)
    x = basic(64, 1, 'conv2')(x, train)
    x = basic(192, 3, 'conv3')(x, train)
    x = alexnet_lib.max_pool(x, 3, 2, ceil_mode=True)
    x = nn.with_logical_constraint(x, alexnet_lib.ACTIVATION_AXES)

    for name, spec in LAYOUT:
      if name == 'pool':
        x = alexnet_lib.max_pool(x, spec, 2, ceil_mode=True)
      else:
        x = inception_cls(*(c(ch) for ch in spec), dtype=self.dtype,
                          bn_group_size=self.bn_group_size,
                          conv_form=self.conv_form, name=name)(x, train)
      x = nn.with_logical_constraint(x, alexnet_lib.ACTIVATION_AXES)

    # Pool and classify in float32, as ResNet does.
    x = alexnet_lib.adaptive_avg_pool(x, (1, 1)).reshape(x.shape[0], -1)
    return alexnet_lib.dense(self.num_classes, ('conv_out', 'classes'),
                             jnp.float32, kernel_init=_INIT, name='head')(x)


def googlenet(**kwargs) -> GoogLeNet:
  """The published GoogLeNet (no auxiliary heads); kwargs override fields."""
  return GoogLeNet(**kwargs)
