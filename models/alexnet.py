"""AlexNet (Krizhevsky et al. 2012), single tower as torchvision's `alexnet`.

Conv 64/11/s4/p2, max-pool 3/2, conv 192/5/p2, max-pool, conv 384/3, 256/3,
256/3, max-pool, adaptive average pool to 6x6, then FC 9216 -> 4096 -> 4096
-> num_classes, ReLU throughout: 61,100,840 parameters at 1000 classes.

No dropout: torchvision's two Dropout(0.5) layers are left out, since the
trainer passes no dropout rng; train and eval therefore agree. `remat` is
accepted (the trainer passes it to every model) and validated, but ignored:
AlexNet's activations are small next to its parameters.

Initialisers follow torchvision's VGG (AlexNet's own are PyTorch's defaults):
He normal (fan_out) conv kernels, N(0, 0.01) FC kernels, zero biases.

Every parameter carries logical axis names only; the trainer's rules map them
to mesh axes:

  conv kernel (kh, kw, in, out)  -> (None, None, 'conv_in', 'conv_out')
                                    (first conv: (None, None, None, 'conv_out'))
  conv bias                      -> ('conv_out',)
  fc1 kernel / bias              -> ('embed', 'mlp') / ('mlp',)
  fc2 kernel / bias              -> ('mlp', 'embed') / ('embed',)
  classifier kernel / bias       -> ('conv_out', 'classes') / ('classes',)

Under the FSDP rules ('embed' and 'conv_out' over fsdp) every large kernel,
the FC ones included, is split; FSDP_TENSOR also splits fc1/fc2 Megatron
style over 'mlp'.

The pooling helpers here (`max_pool`, `adaptive_avg_pool`) work at any input
size, down to 1x1 feature maps, and are shared with models/vgg.py and
models/googlenet.py.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from models import conv_forms
from models import remat as remat_lib

_lp = nn.with_logical_partitioning
# He et al. (2015) init for ReLU networks, fan_out as in torchvision's VGG.
CONV_INIT = nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')
FC_INIT = nn.initializers.normal(stddev=0.01)
# Activations are pinned to batch sharding only (see models/resnet.py).
ACTIVATION_AXES = ('batch', None, None, None)
FEATURE_AXES = ('batch', None)


def scaled(channels: int, width: int) -> int:
  """`channels` of the published model (first conv 64) at first conv `width`."""
  return max(1, channels * width // 64)


def conv(features: int, kernel: int, dtype: Any, *, strides: int = 1,
         padding: int | None = None, use_bias: bool = True,
         in_axis: str | None = 'conv_in', kernel_init=CONV_INIT,
         conv_form: str = 'xla', name: str | None = None) -> nn.Conv:
  """A conv with symmetric (torchvision) padding, kernel // 2 by default,
  computed in `conv_form` (models/conv_forms.py)."""
  pad = kernel // 2 if padding is None else padding
  return nn.Conv(
      features, (kernel, kernel), strides=(strides, strides),
      padding=((pad, pad), (pad, pad)), use_bias=use_bias, dtype=dtype,
      param_dtype=jnp.float32,
      kernel_init=_lp(kernel_init, (None, None, in_axis, 'conv_out')),
      bias_init=_lp(nn.initializers.zeros, ('conv_out',)),
      conv_general_dilated=conv_forms.conv_function(conv_form), name=name)


def dense(features: int, axes: tuple[str, str], dtype: Any,
          kernel_init=FC_INIT, name: str | None = None) -> nn.Dense:
  """A Dense layer whose kernel / bias are named `axes` / `axes[1:]`."""
  return nn.Dense(
      features, dtype=dtype, param_dtype=jnp.float32,
      kernel_init=_lp(kernel_init, axes),
      bias_init=_lp(nn.initializers.zeros, axes[1:]), name=name)


def _pool_size(size: int, window: int, stride: int, pad: int,
               ceil_mode: bool) -> int:
  """torch.nn.MaxPool2d's output size, but at least 1 (torch fails there)."""
  span = size + 2 * pad - window
  if ceil_mode:
    out = -(-span // stride) + 1
    # torch: the last window must start inside the input or the left padding.
    if (out - 1) * stride >= size + pad:
      out -= 1
  else:
    out = span // stride + 1
  return max(out, 1)


def max_pool(x, window: int, stride: int, padding: int = 0,
             ceil_mode: bool = False):
  """torch.nn.MaxPool2d on NHWC, for any input size.

  ceil_mode (and an input smaller than the window) is emulated with extra
  -inf padding on the bottom/right; every window still starts inside the
  input or the left padding, so every output is a max over real elements.
  """
  pads = []
  for size in x.shape[1:3]:
    out = _pool_size(size, window, stride, padding, ceil_mode)
    pads.append((padding, (out - 1) * stride + window - size - padding))
  return nn.max_pool(x, (window, window), strides=(stride, stride),
                     padding=tuple(pads))


def _bins(size: int, out: int) -> np.ndarray:
  """(out, size) averaging matrix: row i averages [floor(i*size/out),
  ceil((i+1)*size/out)), torch.nn.AdaptiveAvgPool2d's bins. Bins overlap
  when size does not divide evenly, and repeat elements when size < out."""
  matrix = np.zeros((out, size), np.float32)
  for i in range(out):
    start = (i * size) // out
    end = -(-((i + 1) * size) // out)
    matrix[i, start:end] = 1.0 / (end - start)
  return matrix


def adaptive_avg_pool(x, output_size: tuple[int, int]):
  """torch.nn.AdaptiveAvgPool2d on NHWC, computed in float32, any input size."""
  x = x.astype(jnp.float32)
  (height, width), (out_h, out_w) = x.shape[1:3], output_size
  if (height, width) == (out_h, out_w):
    return x
  if height % out_h == 0 and width % out_w == 0:  # Disjoint equal bins.
    x = x.reshape(x.shape[0], out_h, height // out_h, out_w, width // out_w,
                  x.shape[-1])
    return x.mean(axis=(2, 4))
  return jnp.einsum('bhwc,ih,jw->bijc', x, _bins(height, out_h),
                    _bins(width, out_w))


def classifier(x, *, hidden: int, num_classes: int, dtype: Any):
  """torchvision's AlexNet/VGG classifier without dropout: flatten (in
  torch's C, H, W order), FC-ReLU, FC-ReLU, then float32 logits."""
  # Flattening channels-first keeps the weight layout torchvision's, which
  # makes a port of its checkpoints a reshape.
  x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
  x = nn.with_logical_constraint(x.astype(dtype), FEATURE_AXES)
  x = nn.relu(dense(hidden, ('embed', 'mlp'), dtype, name='fc1')(x))
  x = nn.relu(dense(hidden, ('mlp', 'embed'), dtype, name='fc2')(x))
  x = nn.with_logical_constraint(x, FEATURE_AXES)
  # The logits in float32, like every model's head here.
  return dense(num_classes, ('conv_out', 'classes'), jnp.float32,
               name='head')(x.astype(jnp.float32))


class AlexNet(nn.Module):
  """AlexNet (torchvision's single-tower layout); returns float32 logits.

  Attributes:
    num_classes: classifier outputs.
    width: channels of the first conv (64 = published); every conv and the
      two hidden FC layers (4096 published) scale by width / 64.
    dtype: compute dtype; parameters are always float32. The final pooling
      and the logits are float32.
    remat: validated and ignored (see the module docstring).
    conv_form: how convolutions are computed (models/conv_forms.py).
  """
  num_classes: int
  width: int = 64
  dtype: Any = jnp.float32
  remat: str = 'none'
  conv_form: str = 'xla'

  @nn.compact
  def __call__(self, x, *, train: bool):
    del train  # No dropout and no batch statistics: train and eval agree.
    remat_lib.check_mode(self.remat)
    c = lambda channels: scaled(channels, self.width)
    x = jnp.asarray(x, self.dtype)
    form = self.conv_form
    x = nn.relu(conv(c(64), 11, self.dtype, strides=4, padding=2,
                     in_axis=None, conv_form=form, name='conv1')(x))
    x = max_pool(x, 3, 2)
    x = nn.relu(conv(c(192), 5, self.dtype, conv_form=form, name='conv2')(x))
    x = max_pool(x, 3, 2)
    x = nn.relu(conv(c(384), 3, self.dtype, conv_form=form, name='conv3')(x))
    x = nn.relu(conv(c(256), 3, self.dtype, conv_form=form, name='conv4')(x))
    x = nn.relu(conv(c(256), 3, self.dtype, conv_form=form, name='conv5')(x))
    x = max_pool(x, 3, 2)
    x = nn.with_logical_constraint(x, ACTIVATION_AXES)
    x = adaptive_avg_pool(x, (6, 6))
    return classifier(x, hidden=c(4096), num_classes=self.num_classes,
                      dtype=self.dtype)


def alexnet(**kwargs) -> AlexNet:
  """The published AlexNet; kwargs override `AlexNet` fields."""
  return AlexNet(**kwargs)
