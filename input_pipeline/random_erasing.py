"""Random erasing (Zhong et al. 2020) with timm's defaults, as DeiT uses it.

With probability data.random_erasing_prob an image gets one box of noise:
an area of 2%-1/3 of the image and a log-uniform aspect ratio in
0.3-1/0.3, up to 10 tries to fit it inside, placed uniformly. timm erases
the normalised image with per-pixel N(0, 1) noise; host images are uint8
and are normalised on the device (trainer/step_functions.py), so the noise
here is that normal noise in 0-255 units, mean + std * N(0, 1) per channel,
rounded and clipped to [0, 255]: 3-4% of the values clip, 0 and 255 lying
1.8-2.1 standard deviations below and 2.3-2.6 above the channels' means.

The box and the noise seed are drawn in numpy for a whole step from the
seed and each example's stream position (example_seeds.py), like every
other augmentation; tf.data fills the box.
"""

import numpy as np

from input_pipeline import example_seeds
from input_pipeline.tf_setup import tf

AREA_RANGE = (0.02, 1 / 3)
LOG_ASPECT_RANGE = (np.log(0.3), np.log(1 / 0.3))
_ATTEMPTS = 10
# The normalisation's statistics (trainer/step_functions.py: RGB_MEAN,
# RGB_STD; tests/test_augment.py checks they agree): the noise is N(0, 1)
# after it.
RGB_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
RGB_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
_SALT = 0x45524153  # 'ERAS': this augmentation's draws
_NOISE_SALT = 0x4E4F4953  # 'NOIS'


def draw(seed: int, positions: np.ndarray, image_size: int,
         prob: float) -> dict[str, np.ndarray]:
  """Each example's box, numpy, for one step.

  Returns:
    'erase_box': int32 [N, 4], (top, left, height, width); height 0: none.
    'erase_seed': int64 [N, 2], the stateless seed of the box's noise.
  """
  n = len(positions)
  u = example_seeds.uniforms(seed, positions, _SALT, 1 + 4 * _ATTEMPTS)
  tries = u[:, 1:].reshape(n, _ATTEMPTS, 4)
  area = image_size * image_size * (
      AREA_RANGE[0] + tries[..., 0] * (AREA_RANGE[1] - AREA_RANGE[0]))
  aspect = np.exp(LOG_ASPECT_RANGE[0] +
                  tries[..., 1] * (LOG_ASPECT_RANGE[1] - LOG_ASPECT_RANGE[0]))
  height = np.rint(np.sqrt(area * aspect)).astype(np.int64)
  width = np.rint(np.sqrt(area / aspect)).astype(np.int64)
  fits = (height < image_size) & (width < image_size)
  # The first try that fits, as timm's loop takes it.
  first = np.argmax(fits, axis=1)
  rows = np.arange(n)
  height, width = height[rows, first], width[rows, first]
  top = (tries[rows, first, 2] * (image_size - height + 1)).astype(np.int64)
  left = (tries[rows, first, 3] * (image_size - width + 1)).astype(np.int64)
  erased = (u[:, 0] < prob) & fits[rows, first]
  box = np.stack([top, left, height, width], axis=-1) * erased[:, None]
  return {'erase_box': box.astype(np.int32),
          'erase_seed': example_seeds.stateless_seeds(seed, positions,
                                                      _NOISE_SALT)}


def spec(local_batch: int) -> dict[str, tf.TensorSpec]:
  return {'erase_box': tf.TensorSpec([local_batch, 4], tf.int32),
          'erase_seed': tf.TensorSpec([local_batch, 2], tf.int64)}


def apply(image: tf.Tensor, box: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  """uint8 [S, S, 3] with the box (top, left, height, width) made noise."""

  def erase():
    top, left, height, width = tf.unstack(box)
    noise = tf.random.stateless_normal(tf.stack([height, width, 3]), seed)
    patch = tf.cast(tf.clip_by_value(tf.round(
        tf.constant(RGB_MEAN) + tf.constant(RGB_STD) * noise), 0, 255),
                    tf.uint8)
    # Pasted by slices and concatenations: copies, where a select over the
    # whole image would compute every pixel.
    middle = image[top:top + height]
    middle = tf.concat([middle[:, :left], patch, middle[:, left + width:]],
                       axis=1)
    return tf.concat([image[:top], middle, image[top + height:]], axis=0)

  out = tf.cond(box[2] > 0, erase, lambda: image)
  out.set_shape(image.shape)
  return out
