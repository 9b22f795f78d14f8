"""RandAugment (Cubuk et al. 2020) as timm runs it for DeiT.

data.randaugment_num_ops = n operations per image, each drawn uniformly
(with replacement) from the 15 of `OPS`, each applied with probability 0.5,
at magnitude m = data.randaugment_magnitude on the 0-10 scale; with
data.randaugment_magnitude_std = s > 0, each applied operation draws its
own magnitude from N(m, s) clipped to [0, 10]. Signed operations (rotate,
shear, translate, and the enhancements' direction) take either sign with
probability 0.5. The magnitude mapping is timm's increasing one (its
'inc1' set, DeiT's `rand-m9-mstd0.5-inc1`): every operation gets stronger as
m grows. Geometric operations resample bilinearly (timm: as configured,
bicubic for DeiT) and fill with the ImageNet mean.

Every random choice is drawn here in numpy for a whole step (`draw`), from
the seed and each example's stream position (example_seeds.py): a resumed
run augments each position as the uninterrupted one did. tf.data then runs
the chosen operations (`apply`), one branch per operation, only the chosen
one executing.
"""

import numpy as np

from input_pipeline import example_seeds
from input_pipeline import image_ops
from input_pipeline.tf_setup import tf

# timm's scale: magnitudes run from 0 to 10.
MAX_MAGNITUDE = 10.0
# timm's probability that a chosen operation is applied.
APPLY_PROB = 0.5
# timm's range of the relative translations: up to 45% of the side.
_TRANSLATE_FRACTION = 0.45
_SALT = 0x52414E44  # 'RAND': this augmentation's draws


def _posterize(image, level):
  # 4 bits kept at magnitude 0, down to none at 10.
  bits = 4 - tf.cast(tf.abs(level) / MAX_MAGNITUDE * 4, tf.int32)
  return image_ops.posterize(image, bits)


def _solarize(image, level):
  # Threshold 256 (nothing inverted) at magnitude 0, down to 0 at 10.
  threshold = 256 - tf.cast(tf.abs(level) / MAX_MAGNITUDE * 256, tf.int32)
  return image_ops.solarize(image, threshold)


def _solarize_add(image, level):
  return image_ops.solarize_add(
      image, tf.cast(tf.abs(level) / MAX_MAGNITUDE * 110, tf.int32))


def _enhance(op):
  # Factor 1 (unchanged) at magnitude 0, to 1 +- 0.9 at 10, at least 0.1.
  return lambda image, level: op(
      image, tf.maximum(0.1, 1.0 + level / MAX_MAGNITUDE * 0.9))


def _translate(op):
  return lambda image, level: op(
      image, level / MAX_MAGNITUDE * _TRANSLATE_FRACTION * image.shape[0])


# name -> (image uint8 [S, S, 3], signed magnitude float32) -> image; in
# timm's order. An operation without an argument ignores the magnitude.
OPS = {
    'AutoContrast': lambda image, _: image_ops.auto_contrast(image),
    'Equalize': lambda image, _: image_ops.equalize(image),
    'Invert': lambda image, _: image_ops.invert(image),
    'Rotate': lambda image, level: image_ops.rotate(
        image, level / MAX_MAGNITUDE * 30.0),
    'PosterizeIncreasing': _posterize,
    'SolarizeIncreasing': _solarize,
    'SolarizeAdd': _solarize_add,
    'ColorIncreasing': _enhance(image_ops.color),
    'ContrastIncreasing': _enhance(image_ops.contrast),
    'BrightnessIncreasing': _enhance(image_ops.brightness),
    'SharpnessIncreasing': _enhance(image_ops.sharpness),
    'ShearX': lambda image, level: image_ops.shear_x(
        image, level / MAX_MAGNITUDE * 0.3),
    'ShearY': lambda image, level: image_ops.shear_y(
        image, level / MAX_MAGNITUDE * 0.3),
    'TranslateXRel': _translate(image_ops.translate_x),
    'TranslateYRel': _translate(image_ops.translate_y),
}
NAMES = tuple(OPS)
# The operation index of a layer that was not applied.
SKIP = len(NAMES)


def draw(seed: int, positions: np.ndarray, num_ops: int, magnitude: float,
         magnitude_std: float) -> dict[str, np.ndarray]:
  """Each example's operations and signed magnitudes, numpy, for one step.

  Returns:
    'randaugment_op': int32 [N, num_ops], an index into NAMES, or SKIP;
    'randaugment_level': float32 [N, num_ops], the signed magnitude.
  """
  u = example_seeds.uniforms(seed, positions, _SALT, 5 * num_ops).reshape(
      len(positions), num_ops, 5)
  ops = np.minimum((u[..., 0] * len(NAMES)).astype(np.int32), SKIP - 1)
  ops = np.where(u[..., 1] < APPLY_PROB, ops, SKIP).astype(np.int32)
  level = np.full(ops.shape, magnitude, np.float64)
  if magnitude_std > 0:
    # Box-Muller: a standard normal from two uniforms; 1 - u is in (0, 1].
    normal = np.sqrt(-2.0 * np.log1p(-u[..., 2])) * np.cos(
        2.0 * np.pi * u[..., 3])
    level = np.clip(magnitude + magnitude_std * normal, 0.0, MAX_MAGNITUDE)
  level = np.where(u[..., 4] < 0.5, -level, level)
  return {'randaugment_op': ops, 'randaugment_level': level.astype(np.float32)}


def spec(local_batch: int, num_ops: int) -> dict[str, tf.TensorSpec]:
  return {'randaugment_op': tf.TensorSpec([local_batch, num_ops], tf.int32),
          'randaugment_level': tf.TensorSpec([local_batch, num_ops],
                                             tf.float32)}


@tf.function
def apply_op(image: tf.Tensor, op: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
  """Operation `op` (an index into NAMES, or SKIP: none) at signed `level`.

  A tf.function, so that Python traces its 15 branches once per image size
  and process, not once per layer and example each time a pipeline is built
  (seconds). TensorFlow inlines it into the decode function: it runs as if
  written there.
  """
  branches = [lambda f=f: f(image, level) for f in OPS.values()]
  out = tf.switch_case(op, branches, default=lambda: image)
  out.set_shape(image.shape)
  return out


def apply(image: tf.Tensor, ops: tf.Tensor, levels: tf.Tensor) -> tf.Tensor:
  """The example's operations in turn: uint8 [S, S, 3] -> uint8 [S, S, 3]."""
  for i in range(ops.shape[0]):
    image = apply_op(image, ops[i], levels[i])
  return image
