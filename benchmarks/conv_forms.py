"""Each ResNet convolution's forward and backward pass, in both forms.

XLA's convolution against patches-then-matmul (models/conv_forms.py), one
layer at a time on one device (the whole machine), for the layer shapes of a
ResNet-18 or ResNet-50 at a given resolution, per-device batch and width.
Prints one JSON line per layer (with its provenance; --out also appends
them to a file): GFLOP/s of each form (FLOPs of the layer
without padding taps: 3 x 2 x N x Ho x Wo x kh x kw x Cin x Cout) and which
form by_shape picks. This is the measurement behind by_shape's rule.

  .venv/bin/python benchmarks/conv_forms.py --batch=16 --image_size=64 --width=64
  .venv/bin/python benchmarks/conv_forms.py --net=resnet50 --batch=8 --image_size=224
  XLA_FLAGS=--xla_cpu_use_xnnpack=true \
    .venv/bin/python benchmarks/conv_forms.py --batch=8 --image_size=224 --repeats=5 \
    --parts --out=results/speed/conv_parts_224px.jsonl

main.py turns XNNPACK on (runtime.cpu_xnnpack); this script runs with
whatever XLA_FLAGS says. --parts times XLA's convolution in its three parts
apart (forward, input gradient, kernel gradient), each at a third of the
layer's FLOPs.
"""

import os
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

import provenance  # benchmarks/provenance.py, beside this script

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from models import conv_forms  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_enum('net', 'resnet18', ['resnet18', 'resnet50'], 'Whose layers.')
flags.DEFINE_integer('batch', 16, 'Images per layer call (per-device batch).')
flags.DEFINE_integer('image_size', 64, 'Input resolution of the network.')
flags.DEFINE_integer('width', 64, 'Channels of the first stage (64: published).')
flags.DEFINE_integer('repeats', 10, 'Timed calls per layer and form (median).')
flags.DEFINE_bool('parts', False, 'Also time the three parts of XLA\'s convolution '
                  'apart: forward, input gradient, kernel gradient.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
FLAGS = flags.FLAGS


def resnet18_layers(image_size: int, width: int):
  """(input side, in channels, out channels, kernel, stride) of each distinct
  conv: the stem, then each stage's first (maybe strided) and repeated conv."""
  layers = [(image_size, 3, width, 7, 2)]
  side, channels = image_size // 4, width  # after the stem and the max-pool
  for stage in range(4):
    out = width * 2**stage
    stride = 1 if stage == 0 else 2
    layers.append((side, channels, out, 3, stride))
    side //= stride
    layers.append((side, out, out, 3, 1))
    channels = out
  return layers


def resnet50_layers(image_size: int, width: int):
  """As resnet18_layers, for the bottleneck blocks (the stride on the 3x3):
  each stage's first block (1x1 in, strided 3x3, 1x1 out, 1x1 projection),
  then a repeated block's 1x1 in, 3x3 and 1x1 out."""
  layers = [(image_size, 3, width, 7, 2)]
  side, channels = image_size // 4, width
  for stage in range(4):
    filters = width * 2**stage
    stride = 1 if stage == 0 else 2
    layers += [(side, channels, filters, 1, 1), (side, filters, filters, 3, stride)]
    out_side = side // stride
    layers += [(out_side, filters, 4 * filters, 1, 1), (side, channels, 4 * filters, 1, stride),
               (out_side, 4 * filters, filters, 1, 1), (out_side, filters, filters, 3, 1)]
    side, channels = out_side, 4 * filters
  return layers


_NHWC = jax.lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


def median_time(function, *args, repeats: int) -> float:
  jax.block_until_ready(function(*args))  # compiles
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(function(*args))
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def time_grad(form: str, x, kernel, stride: int, pad: int, repeats: int) -> float:
  conv = conv_forms.conv_function(form)
  def loss(x, kernel):
    y = conv(x, kernel, (stride, stride), ((pad, pad), (pad, pad)),
             dimension_numbers=_NHWC)
    return jnp.sum(y * y)
  return median_time(jax.jit(jax.grad(loss, argnums=(0, 1))), x, kernel,
                     repeats=repeats)


def time_xla_parts(x, kernel, stride: int, pad: int, repeats: int) -> dict[str, float]:
  """Seconds of XLA's forward convolution, and of each half of its backward
  pass on its own (the gradient with respect to the input, then to the
  kernel), for a given output gradient."""
  conv = lambda x, kernel: jax.lax.conv_general_dilated(
      x, kernel, (stride, stride), ((pad, pad), (pad, pad)), dimension_numbers=_NHWC)
  output_grad = jnp.ones_like(conv(x, kernel))
  input_grad = lambda x, kernel, g: jax.vjp(lambda x: conv(x, kernel), x)[1](g)[0]
  kernel_grad = lambda x, kernel, g: jax.vjp(lambda k: conv(x, k), kernel)[1](g)[0]
  return {
      'forward': median_time(jax.jit(conv), x, kernel, repeats=repeats),
      'input_grad': median_time(jax.jit(input_grad), x, kernel, output_grad,
                                repeats=repeats),
      'kernel_grad': median_time(jax.jit(kernel_grad), x, kernel, output_grad,
                                 repeats=repeats),
  }


def main(argv):
  del argv
  results = provenance.Results(FLAGS.out)
  layers = {'resnet18': resnet18_layers, 'resnet50': resnet50_layers}[FLAGS.net]
  for side, cin, cout, k, stride in layers(FLAGS.image_size, FLAGS.width):
    pad = k // 2
    x = jnp.ones((FLAGS.batch, side, side, cin))
    kernel = jnp.full((k, k, cin, cout), 0.01)
    out = (side + 2 * pad - k) // stride + 1
    flops = 3 * 2 * FLAGS.batch * out * out * k * k * cin * cout
    xla = time_grad('xla', x, kernel, stride, pad, FLAGS.repeats)
    patches = time_grad('patches', x, kernel, stride, pad, FLAGS.repeats)
    record = {
        'input': [FLAGS.batch, side, side, cin], 'kernel': [k, k, cin, cout],
        'stride': stride, 'output_side': out,
        'xla_gflops_per_s': round(flops / xla / 1e9, 1),
        'patches_gflops_per_s': round(flops / patches / 1e9, 1),
        'patches_speedup': round(xla / patches, 2),
        'by_shape_picks': 'patches' if conv_forms.prefers_patches(
            x.shape, kernel.shape, (stride, stride), ((pad, pad), (pad, pad)))
                          else 'xla'}
    if FLAGS.parts:  # each part is a third of the layer's FLOPs
      for part, seconds in time_xla_parts(x, kernel, stride, pad, FLAGS.repeats).items():
        record[f'xla_{part}_gflops_per_s'] = round(flops / 3 / seconds / 1e9, 1)
    results.write(record)


if __name__ == '__main__':
  app.run(main)
