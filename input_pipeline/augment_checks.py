"""Checks of the augmentation keys: RandAugment, random erasing, repeated
augmentation (config.data), CutMix and the mixup/CutMix switch. Called by
cli/validation.py before the runtime starts; raises UsageError with one line."""

import math

import ml_collections

from core.errors import UsageError


def _in_range(key: str, value, low: float, high: float, what: str = '') -> None:
  # `not low <= value <= high` is also true of NaN.
  if not (math.isfinite(value) and low <= value <= high):
    raise UsageError(f'{key}={value!r} must be in [{low}, {high}]{what}')


def _finite_at_least_0(key: str, value, what: str) -> None:
  if not (math.isfinite(value) and value >= 0):
    raise UsageError(f'{key}={value!r} must be a finite number >= 0 ({what})')


# The operations RandAugment draws from (randaugment.OPS, timm's 15;
# tests/test_memory_limits.py keeps the two alike: importing the
# module here would load TensorFlow for every run). Cubuk et al. 2020 search
# N in 1-3 and timm's recipes use 2: more draws than operations only repeats
# them, and each adds a 15-way branch to the host's graph per image (100 made
# one step take minutes).
RANDAUGMENT_MAX_OPS = 15


def check_augmentation(config: ml_collections.ConfigDict) -> None:
  data = config.data
  if not 0 <= data.randaugment_num_ops <= RANDAUGMENT_MAX_OPS:
    raise UsageError(f'data.randaugment_num_ops={data.randaugment_num_ops!r} '
                     f'must be in [0, {RANDAUGMENT_MAX_OPS}], at most the '
                     f'{RANDAUGMENT_MAX_OPS} operations it draws from (0: off; '
                     'Cubuk et al. 2020: 1-3; DeiT: 2)')
  _in_range('data.randaugment_magnitude', data.randaugment_magnitude, 0, 10,
            " (timm's magnitude scale; DeiT: 9)")
  _finite_at_least_0('data.randaugment_magnitude_std',
                     data.randaugment_magnitude_std, '0: a fixed magnitude')
  _in_range('data.random_erasing_prob', data.random_erasing_prob, 0, 1,
            ' (0: off)')
  repeats = data.repeated_augmentation
  if repeats < 0:
    raise UsageError(f'data.repeated_augmentation={repeats!r} must be >= 0 '
                     '(0 or 1: off; DeiT: 3)')
  if repeats > max(config.batch_size, 1):
    raise UsageError(
        f'data.repeated_augmentation={repeats!r}: the copies of an image '
        f'share a batch, so it must be at most batch_size={config.batch_size}')
  _finite_at_least_0('cutmix_alpha', config.cutmix_alpha, '0: off')
  _in_range('mixup_switch_prob', config.mixup_switch_prob, 0, 1,
            ' (the share of batches that use CutMix when mixup is on too)')
