"""VGG-16 and VGG-19 (Simonyan & Zisserman 2015) as torchvision's `vgg16` /
`vgg19`: no batch norm.

3x3 convs with bias (padding 1) and ReLU in five stages, each closed by a
max-pool 2/2; adaptive average pool to 7x7; FC 25088 -> 4096 -> 4096 ->
num_classes. 138,357,544 (vgg16) and 143,667,240 (vgg19) parameters at 1000
classes. Initialisers as torchvision: He normal (fan_out) conv kernels,
N(0, 0.01) FC kernels, zero biases.

No dropout: torchvision's two Dropout(0.5) layers are left out, since the
trainer passes no dropout rng; train and eval therefore agree. `remat`
('full' or 'dots', models/remat.py) recomputes each conv stage in the
backward pass.

Every parameter carries logical axis names only; the trainer's rules map them
to mesh axes:

  conv kernel (kh, kw, in, out)  -> (None, None, 'conv_in', 'conv_out')
                                    (first conv: (None, None, None, 'conv_out'))
  conv bias                      -> ('conv_out',)
  fc1 kernel / bias              -> ('embed', 'mlp') / ('mlp',)
  fc2 kernel / bias              -> ('mlp', 'embed') / ('embed',)
  classifier kernel / bias       -> ('conv_out', 'classes') / ('classes',)
"""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp

from models import alexnet as alexnet_lib
from models import remat as remat_lib

# Convs per stage; every stage ends in a max-pool 2/2. Output channels of
# stage i: 64 * 2**i, capped at 512.
STAGE_SIZES = {
    16: (2, 2, 3, 3, 3),
    19: (2, 2, 4, 4, 4),
}


class Stage(nn.Module):
  """`num_convs` 3x3 conv-ReLU layers, then a max-pool 2/2."""
  features: int
  num_convs: int
  first: bool = False  # The network's first stage: RGB input.
  dtype: Any = jnp.float32
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x):
    for i in range(self.num_convs):
      in_axis = None if self.first and i == 0 else 'conv_in'
      x = nn.relu(alexnet_lib.conv(self.features, 3, self.dtype,
                                   in_axis=in_axis, conv_form=self.conv_form,
                                   name=f'conv{i + 1}')(x))
    return alexnet_lib.max_pool(x, 2, 2)


class VGG(nn.Module):
  """VGG without batch norm; returns float32 logits.

  Attributes:
    stage_sizes: convs per stage, e.g. (2, 2, 3, 3, 3) for VGG-16.
    num_classes: classifier outputs.
    width: channels of the first stage (64 = published); every conv and the
      two hidden FC layers (4096 published) scale by width / 64.
    dtype: compute dtype; parameters are always float32. The final pooling
      and the logits are float32.
    remat: 'none', 'full' or 'dots' (models/remat.py): what each stage
      recomputes in the backward pass.
    conv_form: how convolutions are computed (models/conv_forms.py).
  """
  stage_sizes: Sequence[int]
  num_classes: int
  width: int = 64
  dtype: Any = jnp.float32
  remat: str = 'none'
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x, *, train: bool):
    del train  # No dropout and no batch statistics: train and eval agree.
    stage_cls = remat_lib.wrap(Stage, self.remat)
    c = lambda channels: alexnet_lib.scaled(channels, self.width)
    x = jnp.asarray(x, self.dtype)
    for i, num_convs in enumerate(self.stage_sizes):
      x = stage_cls(c(min(64 * 2**i, 512)), num_convs, first=i == 0,
                    dtype=self.dtype, conv_form=self.conv_form,
                    name=f'stage{i + 1}')(x)
      x = nn.with_logical_constraint(x, alexnet_lib.ACTIVATION_AXES)
    x = alexnet_lib.adaptive_avg_pool(x, (7, 7))
    return alexnet_lib.classifier(x, hidden=c(4096),
                                  num_classes=self.num_classes,
                                  dtype=self.dtype)


def vgg(depth: int, **kwargs) -> VGG:
  """The published VGG of this depth (16 or 19); kwargs override fields."""
  return VGG(**{'stage_sizes': STAGE_SIZES[depth], **kwargs})
