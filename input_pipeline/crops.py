"""Crops taken while decoding: the ImageNet train and eval transforms.

A JPEG is decoded only inside the crop window (`tf.io.decode_and_crop_jpeg`):
the rows below the window are never read and the pixels outside it are never
transformed to RGB, which is most of the input pipeline's time on ImageNet.
Other formats (PNG, GIF, BMP) are decoded whole and then cropped, so a data
set that mixes them works, only slower; a source that knows it holds only
JPEGs says so (`jpeg_only`) and saves the per-image format test.

These functions run once per image at thousands of images a second on a
few cores, so they use as few ops as they can: each op costs microseconds of
executor time. Output is uint8 [size, size, 3]; normalisation happens on the
device.
"""

from typing import NamedTuple

from input_pipeline.tf_setup import tf

# Inception-style random resized crop (Szegedy et al. 2015): a crop of
# 8%-100% of the image area with aspect ratio 3/4-4/3.
AREA_RANGE = (0.08, 1.0)
ASPECT_RATIO_RANGE = (3 / 4, 4 / 3)
# Tries to find a crop inside the image before falling back to the whole
# image; 10 is what the reference ResNet pipelines use.
_MAX_ATTEMPTS = 10
# A cropped row is decoded straight into the output only if it starts on the
# JPEG's block grid: every 16 pixels with the usual 4:2:0 or 4:2:2 chroma
# subsampling, 8 without (a divisor of 16). Elsewhere TensorFlow decodes each
# row into a scratch buffer and copies it, 3-5% of the train transform's time
# (benchmarks/input_pipeline.py).
JPEG_BLOCK_COLUMNS = 16


class JpegDecoding(NamedTuple):
  """How a JPEG crop is decoded (config.data.jpeg_scaled_decode).

  scaled_to: decode at 1/2, 1/4 or 1/8 scale in the DCT domain, the largest
    that keeps the decoded crop at least this many pixels on its shorter
    side (the output size); 0: always full scale, the exact decode.
  """
  scaled_to: int = 0


EXACT = JpegDecoding()
# DCT-domain scale factors libjpeg decodes at (1/ratio of each side).
_RATIOS = (1, 2, 4, 8)


def scaled_window(window: tf.Tensor, height: tf.Tensor, width: tf.Tensor,
                  ratio: int) -> tf.Tensor:
  """`window` in the coordinates of the image decoded at 1/ratio scale.

  The scaled image is ceil(height / ratio) x ceil(width / ratio) pixels
  (libjpeg's rounding); the window is widened outwards to whole scaled
  pixels, so that it covers the same region of the image.
  """
  if ratio == 1:
    return window
  top, left = window[0] // ratio, window[1] // ratio
  bottom = tf.minimum((window[0] + window[2] + ratio - 1) // ratio,
                      (height + ratio - 1) // ratio)
  right = tf.minimum((window[1] + window[3] + ratio - 1) // ratio,
                     (width + ratio - 1) // ratio)
  return tf.stack([top, left, bottom - top, right - left])


def decode_ratio_index(window: tf.Tensor, scaled_to: int) -> tf.Tensor:
  """Index into _RATIOS of the largest ratio that keeps the crop >= scaled_to."""
  shorter = tf.minimum(window[2], window[3])
  return tf.add_n([tf.cast(shorter >= r * scaled_to, tf.int32)
                   for r in _RATIOS[1:]])


def _decode_jpeg_window(encoded: tf.Tensor, window: tf.Tensor,
                        shape: tf.Tensor, decoding: JpegDecoding) -> tf.Tensor:
  def at(ratio):
    return lambda: tf.io.decode_and_crop_jpeg(
        encoded, scaled_window(window, shape[0], shape[1], ratio),
        channels=3, ratio=ratio)
  if not decoding.scaled_to:
    return at(1)()
  # `ratio` is an attribute of the op, not an input: one branch per value.
  # The branch costs a tenth of the train transform at 224 px, where no crop
  # of an ImageNet-sized image qualifies (docs/input-speed.md).
  return tf.switch_case(decode_ratio_index(window, decoding.scaled_to),
                        [at(r) for r in _RATIOS])


def _decode_window(encoded: tf.Tensor, window_fn, jpeg_only: bool,
                   decoding: JpegDecoding = EXACT) -> tf.Tensor:
  """RGB uint8 pixels of the window `window_fn(height, width)` of an image.

  Args:
    encoded: a scalar string, the encoded image.
    window_fn: (height, width) int32 scalars -> int32 [4] window
      [top, left, crop_height, crop_width] inside the image.
    jpeg_only: skip the format test; anything but a JPEG then fails to
      decode (and is skipped as unreadable).
    decoding: see `JpegDecoding`; other formats are always decoded exactly.
  """

  def jpeg():
    # The header alone gives the size: nothing is decoded yet.
    shape = tf.io.extract_jpeg_shape(encoded)
    window = window_fn(shape[0], shape[1])
    return _decode_jpeg_window(encoded, window, shape, decoding)

  def other():
    # channels=3 makes greyscale RGB and drops alpha; expand_animations=False
    # keeps one rank-3 frame for every format.
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    shape = tf.shape(image)
    window = window_fn(shape[0], shape[1])
    return tf.slice(image, tf.stack([window[0], window[1], 0]),
                    tf.stack([window[2], window[3], 3]))

  image = jpeg() if jpeg_only else tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
  image.set_shape([None, None, 3])
  return image


def _resize(image: tf.Tensor, size: int) -> tf.Tensor:
  """uint8 [size, size, 3] by bilinear interpolation, aspect ratio not kept."""
  # No antialiasing: it triples the cost of this step and the crops shrink by
  # at most ~2x, where plain bilinear is what the reference pipelines use.
  # The raw op: tf.image.resize adds checks and reshapes around it.
  resized = tf.raw_ops.ResizeBilinear(
      images=image[None], size=[size, size], half_pixel_centers=True)[0]
  # A bilinear mix of uint8 values stays within [0, 255]: no clip needed.
  # The cast truncates; rounding first would cost an op over every pixel
  # (~3% of the pipeline) to move the mean by half a grey level, which the
  # normalisation on the device absorbs. Integer pixels, e.g. an image
  # already at `size`, come out exactly.
  out = tf.cast(resized, tf.uint8)
  out.set_shape([size, size, 3])
  return out


def inception_window(height: tf.Tensor, width: tf.Tensor, crop_seed: tf.Tensor,
                     snap_to_blocks: bool = False) -> tf.Tensor:
  """The random resized crop's window [top, left, crop_height, crop_width].

  Args:
    height, width: int32 scalars, the image size.
    crop_seed: int64 [2], the stateless seed.
    snap_to_blocks: move the window's left edge left onto the JPEG block
      grid (by at most JPEG_BLOCK_COLUMNS - 1 pixels; size, area and aspect
      ratio unchanged), where the decoder writes cropped rows in place.
  """
  begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.stack([height, width, 3]),
      bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=crop_seed,
      min_object_covered=0.0, aspect_ratio_range=ASPECT_RATIO_RANGE,
      area_range=AREA_RANGE, max_attempts=_MAX_ATTEMPTS,
      use_image_if_no_bounding_boxes=True)
  left = begin[1]
  if snap_to_blocks:
    left = left // JPEG_BLOCK_COLUMNS * JPEG_BLOCK_COLUMNS
  return tf.stack([begin[0], left, extent[0], extent[1]])


def inception_crop(encoded: tf.Tensor, size: int, crop_seed: tf.Tensor,
                   flip: tf.Tensor, jpeg_only: bool = False,
                   snap_to_blocks: bool = False,
                   decoding: JpegDecoding = EXACT) -> tf.Tensor:
  """Random resized crop, then a horizontal flip, of an encoded image.

  Args:
    encoded: a scalar string, the encoded image (JPEG fast, others too).
    size: output side in pixels.
    crop_seed: int64 [2] seed of the crop; with `flip` it makes the result a
      pure function of the example, which is what lets a resumed run
      reproduce augmentation bit for bit (see example_seeds.py).
    flip: bool scalar, mirror the result left-right.
    jpeg_only: see `_decode_window`.
    snap_to_blocks: see `inception_window`.
    decoding: see `JpegDecoding`.

  Returns:
    uint8 [size, size, 3].
  """
  window = lambda h, w: inception_window(h, w, crop_seed, snap_to_blocks)
  image = _resize(_decode_window(encoded, window, jpeg_only, decoding), size)
  # Flipped after the resize: fewer pixels to move.
  return tf.cond(flip, lambda: tf.reverse(image, axis=[1]), lambda: image)


def center_crop_window(height: tf.Tensor, width: tf.Tensor,
                       crop_fraction: float) -> tf.Tensor:
  """The centred square of side crop_fraction * min(height, width)."""
  shorter = tf.cast(tf.minimum(height, width), tf.float32)
  side = tf.maximum(tf.cast(crop_fraction * shorter, tf.int32), 1)
  # (x - side + 1) // 2 as in the reference ResNet pipeline, so that figures
  # are comparable with published ones.
  return tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side,
                   side])


def center_crop(encoded: tf.Tensor, size: int, crop_fraction: float,
                jpeg_only: bool = False,
                decoding: JpegDecoding = EXACT) -> tf.Tensor:
  """The evaluation view: the centred square, resized to `size`.

  With crop_fraction 0.875 this is the usual "resize the shorter side to
  size / 0.875 and take the central size x size", done on the encoded image
  so that only the kept square is decoded.

  Returns:
    uint8 [size, size, 3].
  """
  if not 0.0 < crop_fraction <= 1.0:
    raise ValueError(f'crop_fraction must be in (0, 1], got {crop_fraction}')
  window = lambda h, w: center_crop_window(h, w, crop_fraction)
  return _resize(_decode_window(encoded, window, jpeg_only, decoding), size)
