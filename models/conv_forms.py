"""How a convolution is computed: XLA's convolution, or patches then one matmul.

The forms share the parameters (an [kh, kw, in, out] kernel) and compute the
same result up to float rounding; only their speed differs, and it differs a
lot on XLA's CPU backend. There the backward pass of a 3x3 convolution with a
small output (ResNet-18's last stage at 64 px: 2x2 pixels, 512 channels)
runs at about 3 GFLOP/s, while gathering the kh*kw shifted windows into one
[pixels, kh*kw*in] matrix and multiplying it by the kernel runs at about
90 GFLOP/s, near the machine's matmul peak. At large outputs with stride 1
XLA's own convolution is as fast or faster and needs no kh*kw-fold copy of
the input (benchmarks/conv_forms.py measures each ResNet layer both ways).

  xla       lax.conv_general_dilated everywhere (GPUs and TPUs: cuDNN and the
            TPU convolution units beat any rewrite)
  patches   patches then matmul for every plain convolution
  by_shape  patches where they won on CPU: every 1x1 convolution (its
            "patches" are the input itself, so the form is a plain matmul);
            other kernels with at least MIN_PATCH_FEATURES output channels
            and a stride above 1 or an output smaller than STRIDE1_MAX_PIXELS
            pixels
"""

import functools
from typing import Callable, Sequence

import jax.numpy as jnp
from jax import lax

FORMS = ('xla', 'patches', 'by_shape')

# Measured layer by layer on ResNet-18's shapes (benchmarks/conv_forms.py):
# stride-1 outputs of at least 28x28 pixels keep XLA's conv, which matched or
# beat the patches there (and the patches copy the input kh*kw times); so do
# layers with fewer than 64 output channels, whose matmul is too narrow to
# run near the peak (ResNet-18 at width 16: XLA's conv 1.3-1.8x faster).
STRIDE1_MAX_PIXELS = 28 * 28
MIN_PATCH_FEATURES = 64
# 1x1 kernels are a matmul whatever their shape: measured on ResNet-50's
# layers at 224 px (`benchmarks/conv_forms.py --net=resnet50`), XLA's CPU
# convolution ran them at 3.5-34 GFLOP/s, the matmul at 31-66 (1.9-13.6x),
# the largest gains at 56x56 and 28x28 outputs, where the rule above keeps
# XLA's convolution for larger kernels.

# The layout every model here uses: NHWC images, HWIO kernels.
_NHWC = lax.ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1),
                                 out_spec=(0, 3, 1, 2))


def _is_plain(padding, lhs_dilation, rhs_dilation, dimension_numbers,
              feature_group_count) -> bool:
  """A 2-D NHWC convolution without dilation or groups, with explicit padding."""
  if isinstance(padding, str):  # 'SAME' depends on the shapes: leave it to XLA
    return False
  ones = lambda d: d is None or all(v == 1 for v in d)
  return (len(padding) == 2 and ones(lhs_dilation)
          and ones(rhs_dilation) and feature_group_count == 1
          and dimension_numbers == _NHWC)


def patches_conv(x, kernel, strides: Sequence[int],
                 padding: Sequence[tuple[int, int]], precision=None):
  """The convolution as one matmul of shifted windows by the kernel.

  Window (i, j) of the kernel sees x[:, i::stride, j::stride]; the windows are
  stacked along channels in the kernel's (kh, kw, in) order, so the kernel
  reshaped to [kh*kw*in, out] multiplies them directly. The backward pass is
  two matmuls and a strided add: no convolution at all.
  """
  kh, kw, cin, cout = kernel.shape
  (sh, sw), ((top, bottom), (left, right)) = strides, padding
  x = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
  n, h, w, _ = x.shape
  ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
  windows = [x[:, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw, :]
             for i in range(kh) for j in range(kw)]
  stacked = windows[0] if len(windows) == 1 else jnp.concatenate(windows, axis=-1)
  out = jnp.dot(stacked.reshape(n * ho * wo, kh * kw * cin),
                kernel.reshape(kh * kw * cin, cout), precision=precision)
  return out.reshape(n, ho, wo, cout)


def prefers_patches(x_shape, kernel_shape, strides, padding) -> bool:
  """by_shape's rule (see MIN_PATCH_FEATURES)."""
  kh, kw = kernel_shape[:2]
  if kh == kw == 1:
    return True
  ho = (x_shape[1] + sum(padding[0]) - kh) // strides[0] + 1
  wo = (x_shape[2] + sum(padding[1]) - kw) // strides[1] + 1
  if kernel_shape[-1] < MIN_PATCH_FEATURES:
    return False
  return max(strides) > 1 or ho * wo < STRIDE1_MAX_PIXELS


@functools.cache  # one function per form: modules built from it compare equal
def conv_function(form: str) -> Callable:
  """A drop-in for lax.conv_general_dilated (flax's nn.Conv takes it as
  `conv_general_dilated`) that computes in `form`."""
  if form not in FORMS:
    raise ValueError(f'unknown conv form {form!r}; accepted: {", ".join(FORMS)}')

  def conv(lhs, rhs, window_strides, padding, lhs_dilation=None,
           rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
           precision=None, **kwargs):
    if padding == 'VALID':
      padding = ((0, 0), (0, 0))
    plain = not kwargs and _is_plain(padding, lhs_dilation, rhs_dilation,
                                     dimension_numbers, feature_group_count)
    if plain and (form == 'patches' or form == 'by_shape' and prefers_patches(
        lhs.shape, rhs.shape, window_strides, padding)):
      return patches_conv(lhs, rhs, window_strides, padding, precision)
    return lax.conv_general_dilated(
        lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count, precision=precision, **kwargs)

  return conv
