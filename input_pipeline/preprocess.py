"""Per-example TensorFlow ops: decode, resize, augment. Output stays uint8.

Normalisation is left to the device, so host batches are 4x smaller than
float32 and the host does less work per image.
"""

from input_pipeline.tf_setup import tf
from input_pipeline.validate import RESIZED_AUGMENTATIONS


def decode(path: tf.Tensor) -> tf.Tensor:
  """RGB uint8 [H, W, 3] from a JPEG or PNG file, whatever its channels."""
  # channels=3 turns greyscale into RGB and drops alpha; expand_animations
  # =False keeps a rank-3 result for every file.
  image = tf.io.decode_image(
      tf.io.read_file(path), channels=3, expand_animations=False)
  image.set_shape([None, None, 3])
  return image


def resize(image: tf.Tensor, size: int) -> tf.Tensor:
  """Square uint8 [size, size, 3]; the aspect ratio is not kept."""
  # Antialiasing matters when shrinking by a lot (e.g. 64 -> 32 px). At equal
  # size the filter is the identity, so no branch is needed (a tf.cond costs
  # more per image than the resize it would skip).
  out = tf.image.resize(image, [size, size], antialias=True)
  out = tf.cast(tf.clip_by_value(tf.round(out), 0, 255), tf.uint8)
  out.set_shape([size, size, 3])
  return out


def augment(image: tf.Tensor, kind: str, seed: tf.Tensor) -> tf.Tensor:
  """Training augmentation of a [S, S, 3] image.

  Args:
    image: uint8 [S, S, 3].
    kind: 'none', 'flip' (horizontal) or 'crop_flip' (random S x S crop of
      the image reflect-padded by S/8 pixels, then flip).
    seed: int64 [2]; the stateless ops make the result a pure function of it,
      which is what lets a resumed run reproduce augmentation bit for bit.
  """
  if kind not in RESIZED_AUGMENTATIONS:
    # inception_crop is not here: it crops the encoded image (crops.py).
    raise ValueError(
        f'unknown augmentation {kind!r}; one of {RESIZED_AUGMENTATIONS}')
  if kind == 'none':
    return image
  crop_seed, flip_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, num=2))
  if kind == 'crop_flip':
    size = image.shape[0]
    pad = size // 8
    if pad:
      # Reflect rather than zero padding: no black borders for the model to
      # learn as a feature of shifted images.
      padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], mode='REFLECT')
      image = tf.image.stateless_random_crop(
          padded, [size, size, 3], seed=crop_seed)
  return tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
