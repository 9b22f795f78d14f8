"""What the host adds to a training image after its crop and flip: the
`config.data` keys of RandAugment, random erasing and repeated augmentation.

No TensorFlow here: create.py reads the config before anything heavy is
imported. host_augment.py applies it.
"""

from typing import NamedTuple


class HostAugmentation(NamedTuple):
  """The host's extra training augmentation; every field at its default: none.

  randaugment_num_ops: RandAugment operations per image (randaugment.py).
  randaugment_magnitude: their magnitude, 0-10.
  randaugment_magnitude_std: std of each operation's magnitude; 0: fixed.
  random_erasing_prob: probability of erasing a box (random_erasing.py).
  repeats: copies of each image in an epoch's order (repeated.py); <= 1: one.
  """
  randaugment_num_ops: int = 0
  randaugment_magnitude: float = 9.0
  randaugment_magnitude_std: float = 0.0
  random_erasing_prob: float = 0.0
  repeats: int = 1


OFF = HostAugmentation()


def from_data_config(data_config) -> HostAugmentation:
  """The HostAugmentation of `config.data` (values checked by validation)."""
  return HostAugmentation(
      randaugment_num_ops=data_config.randaugment_num_ops,
      randaugment_magnitude=data_config.randaugment_magnitude,
      randaugment_magnitude_std=data_config.randaugment_magnitude_std,
      random_erasing_prob=data_config.random_erasing_prob,
      repeats=max(1, data_config.repeated_augmentation))
