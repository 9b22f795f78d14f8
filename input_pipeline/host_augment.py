"""The host's extra training augmentation in the stream and in tf.data.

`inputs` adds each example's random choices to a step's stream inputs
(numpy, from the seed and the stream positions); `apply` runs them on the
cropped and flipped uint8 image inside the decode function: RandAugment,
then random erasing, timm's order. With nothing on, neither adds anything:
the stream and the decode graph are those of a run without these keys.
"""

import numpy as np

from input_pipeline import randaugment
from input_pipeline import random_erasing
from input_pipeline.augmentation import HostAugmentation
from input_pipeline.tf_setup import tf


def inputs(augmentation: HostAugmentation, seed: int, positions: np.ndarray,
           image_size: int) -> dict[str, np.ndarray]:
  """The step's extra stream inputs: each example's draws."""
  extra = {}
  if augmentation.randaugment_num_ops > 0:
    extra.update(randaugment.draw(
        seed, positions, augmentation.randaugment_num_ops,
        augmentation.randaugment_magnitude,
        augmentation.randaugment_magnitude_std))
  if augmentation.random_erasing_prob > 0:
    extra.update(random_erasing.draw(seed, positions, image_size,
                                     augmentation.random_erasing_prob))
  return extra


def spec(augmentation: HostAugmentation, local_batch: int
         ) -> dict[str, tf.TensorSpec]:
  """The tf.TensorSpec of each of `inputs`."""
  extra = {}
  if augmentation.randaugment_num_ops > 0:
    extra.update(randaugment.spec(local_batch,
                                  augmentation.randaugment_num_ops))
  if augmentation.random_erasing_prob > 0:
    extra.update(random_erasing.spec(local_batch))
  return extra


def apply(image: tf.Tensor, example: dict[str, tf.Tensor],
          augmentation: HostAugmentation) -> tf.Tensor:
  """uint8 [S, S, 3] -> uint8 [S, S, 3], with one example's draws."""
  if augmentation.randaugment_num_ops > 0:
    image = randaugment.apply(image, example['randaugment_op'],
                              example['randaugment_level'])
  if augmentation.random_erasing_prob > 0:
    image = random_erasing.apply(image, example['erase_box'],
                                 example['erase_seed'])
  return image
