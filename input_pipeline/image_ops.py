"""The image operations of RandAugment, in TensorFlow, on uint8 [S, S, 3].

Each follows the Pillow operation that timm's RandAugment calls (ImageOps,
ImageEnhance, Image.transform), so that a magnitude means what it means
there; randaugment.py maps magnitudes to their arguments. They run inside
the tf.data graph, one image at a time, so they use few ops: each costs
microseconds of executor time. Every function returns uint8 of the input's
shape; arithmetic that could leave [0, 255] is clipped, never wrapped.
"""

import math

from input_pipeline.tf_setup import tf

# What the geometric operations fill uncovered pixels with: the ImageNet
# mean in 0-255 units, rounded, as timm's RandAugment hyper-parameters set it.
FILL = (124, 116, 104)


def _to_uint8(x: tf.Tensor) -> tf.Tensor:
  """Clipped and truncated, as Pillow stores the result of a blend."""
  return tf.cast(tf.clip_by_value(x, 0.0, 255.0), tf.uint8)


def _grey(x: tf.Tensor) -> tf.Tensor:
  """float32 [S, S, 1]: Pillow's 'L' conversion (ITU-R 601-2 luma), rounded."""
  weights = tf.constant([0.299, 0.587, 0.114], tf.float32)
  return tf.round(tf.reduce_sum(x * weights, axis=-1, keepdims=True))


def blend(degenerate: tf.Tensor, x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """Pillow's Image.blend(degenerate, x, factor) of float32 images, as uint8:
  factor 1 is x, 0 is degenerate, beyond 1 extrapolates (and clips)."""
  return _to_uint8(degenerate + factor * (x - degenerate))


def auto_contrast(image: tf.Tensor) -> tf.Tensor:
  """Each channel stretched to span 0-255; a constant channel is kept."""
  pixels = tf.reshape(image, [-1, 3])
  low = tf.cast(tf.reduce_min(pixels, axis=0), tf.float32)
  high = tf.cast(tf.reduce_max(pixels, axis=0), tf.float32)
  x = tf.cast(image, tf.float32)
  spread = high > low
  scale = tf.where(spread, 255.0 / tf.maximum(high - low, 1.0), 1.0)
  offset = tf.where(spread, -low * scale, 0.0)
  return _to_uint8(x * scale + offset)


def equalize(image: tf.Tensor) -> tf.Tensor:
  """Each channel's histogram flattened, with Pillow's lookup table.

  Pillow: step = (pixels - count of the last used level) // 255; level i
  maps to (step // 2 + pixels below i) // step; a channel with step 0 (one
  level, or almost all pixels at the top one) is kept.
  """
  x = tf.cast(image, tf.int32)
  # One histogram for all three channels: channel c's levels at c * 256.
  histogram = tf.reshape(tf.math.bincount(
      tf.reshape(x + tf.constant([0, 256, 512]), [-1]), minlength=768,
      maxlength=768), [3, 256])
  last_used = tf.reduce_max(
      tf.where(histogram > 0, tf.range(256)[None, :], -1), axis=1)
  last_count = tf.gather(histogram, last_used, axis=1, batch_dims=1)
  pixels = tf.reduce_sum(histogram, axis=1)
  step = (pixels - last_count) // 255
  below = tf.cumsum(histogram, axis=1, exclusive=True)
  table = tf.minimum(
      (step[:, None] // 2 + below) // tf.maximum(step, 1)[:, None], 255)
  table = tf.where(step[:, None] > 0, table, tf.range(256)[None, :])
  # Channel c reads row c of the table.
  out = tf.gather(table, tf.transpose(x, [2, 0, 1]), axis=1, batch_dims=1)
  return tf.cast(tf.transpose(out, [1, 2, 0]), tf.uint8)


def invert(image: tf.Tensor) -> tf.Tensor:
  return 255 - image


def posterize(image: tf.Tensor, bits: tf.Tensor) -> tf.Tensor:
  """Keeps the `bits` (0-8, int32) most significant bits of every value."""
  mask = 256 - tf.bitwise.left_shift(1, 8 - bits)
  return tf.cast(tf.bitwise.bitwise_and(tf.cast(image, tf.int32), mask),
                 tf.uint8)


def solarize(image: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
  """Values >= threshold (int32, 0-256) inverted."""
  return tf.where(tf.cast(image, tf.int32) >= threshold, 255 - image, image)


def solarize_add(image: tf.Tensor, add: tf.Tensor,
                 threshold: int = 128) -> tf.Tensor:
  """`add` (int32) added to values below threshold, saturating at 255."""
  x = tf.cast(image, tf.int32)
  return tf.cast(tf.where(x < threshold, tf.minimum(x + add, 255), x),
                 tf.uint8)


def color(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """ImageEnhance.Color: blended with its own grey image."""
  x = tf.cast(image, tf.float32)
  return blend(_grey(x), x, factor)


def contrast(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """ImageEnhance.Contrast: blended with a flat image of its mean grey."""
  x = tf.cast(image, tf.float32)
  mean = tf.floor(tf.reduce_mean(_grey(x)) + 0.5)
  return blend(mean, x, factor)


def brightness(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """ImageEnhance.Brightness: blended with black."""
  return blend(0.0, tf.cast(image, tf.float32), factor)


def sharpness(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """ImageEnhance.Sharpness: blended with its smoothed self (Pillow's
  ImageFilter.SMOOTH, 3x3 weights 1 around a centre of 5, over 13), whose
  border pixels Pillow leaves unfiltered."""
  x = tf.cast(image, tf.float32)
  # Sums of shifted slices: on the CPU several times faster than a
  # depthwise convolution.
  rows = x[:-2] + x[1:-1] + x[2:]
  box = rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]
  centre = x[1:-1, 1:-1]
  smooth = tf.round((box + 4.0 * centre) / 13.0)
  degenerate = x + tf.pad(smooth - centre, [[1, 1], [1, 1], [0, 0]])
  return blend(degenerate, x, factor)


def affine(image: tf.Tensor, matrix: tf.Tensor) -> tf.Tensor:
  """Bilinear resampling: output pixel (x, y) reads the input at
  (a x + b y + c, d x + e y + f), matrix = [a, b, c, d, e, f] in pixel-index
  coordinates; pixels from outside the image are FILL."""
  fill = tf.constant(FILL, tf.float32)
  # The op fills with one value for all channels: fill with 0 around the
  # image minus FILL, then add FILL back. Bilinear weights sum to 1, so
  # edge pixels blend with FILL exactly as with a coloured border.
  shifted = tf.cast(image, tf.float32) - fill
  transform = tf.concat([matrix, tf.zeros([2], tf.float32)], axis=0)[None]
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=shifted[None], transforms=transform,
      output_shape=tf.shape(image)[:2], fill_value=0.0,
      interpolation='BILINEAR', fill_mode='CONSTANT')[0]
  out = _to_uint8(tf.round(out + fill))
  out.set_shape(image.shape)
  return out


def rotate(image: tf.Tensor, degrees: tf.Tensor) -> tf.Tensor:
  """Counter-clockwise about the centre, as Image.rotate."""
  angle = degrees * (math.pi / 180.0)
  cos, sin = tf.cos(angle), tf.sin(angle)
  # Pixel centres are at indices here, at index + 0.5 in Pillow's
  # coordinates: the centre of rotation is (S - 1) / 2.
  centre = (image.shape[0] - 1) / 2.0
  return affine(image, tf.stack([
      cos, -sin, centre - cos * centre + sin * centre,
      sin, cos, centre - sin * centre - cos * centre]))


def shear_x(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """Image.transform AFFINE (1, factor, 0, 0, 1, 0): rows slide sideways in
  proportion to their distance from the top."""
  return affine(image, tf.stack([1.0, factor, 0.5 * factor, 0.0, 1.0, 0.0]))


def shear_y(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  return affine(image, tf.stack([1.0, 0.0, 0.0, factor, 1.0, 0.5 * factor]))


def translate_x(image: tf.Tensor, pixels: tf.Tensor) -> tf.Tensor:
  """Content moves `pixels` to the left (right when negative)."""
  return affine(image, tf.stack([1.0, 0.0, pixels, 0.0, 1.0, 0.0]))


def translate_y(image: tf.Tensor, pixels: tf.Tensor) -> tf.Tensor:
  """Content moves `pixels` up (down when negative)."""
  return affine(image, tf.stack([1.0, 0.0, 0.0, 0.0, 1.0, pixels]))
