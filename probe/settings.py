"""The probe section of the config: its checks and the message sizes it implies."""

import math

import numpy as np

from configs import values
from core.errors import UsageError

HOST_GROUPINGS = ('auto', 'process', 'hostname')  # probe.host_grouping
FLOAT_BYTES = 4  # the collectives move float32 elements


def check_config(config) -> None:
  """UsageError (exit 2) for a probe.* value the probe cannot use; called
  before the runtime starts, so a bad value costs nothing."""
  probe = config.probe
  for key, minimum in (('min_message_bytes', FLOAT_BYTES), ('num_sizes', 2),
                       ('repeats', 1), ('ops_per_call', 1), ('step_repeats', 1),
                       ('input_batches', 1), ('max_message_bytes', 0)):
    if probe[key] < minimum:
      raise UsageError(f'probe.{key}={probe[key]!r} must be >= {minimum}')
  if probe.max_message_bytes and probe.max_message_bytes <= probe.min_message_bytes:
    raise UsageError(f'probe.max_message_bytes={probe.max_message_bytes} must be above '
                     f'probe.min_message_bytes={probe.min_message_bytes} (0: the '
                     "model's parameter bytes)")
  if probe.host_grouping not in HOST_GROUPINGS:
    raise UsageError(f'probe.host_grouping={probe.host_grouping!r} is not accepted; '
                     f'use one of: {", ".join(HOST_GROUPINGS)}')
  per_device_batches(config)  # a bad list fails here


def per_device_batches(config) -> list[int]:
  """The per-device batches the probe times (configs/values.py: plan_batches)."""
  return values.plan_batches(config)


def message_sizes(smallest: int, largest: int, count: int, multiple: int) -> list[int]:
  """`count` log-spaced sizes from `smallest` to `largest` bytes, each rounded
  up to a multiple of `multiple` (so that every participant's share is whole
  float32 elements), without repeats. UsageError if fewer than two remain."""
  step = FLOAT_BYTES * multiple
  sizes = sorted({int(math.ceil(s / step)) * step
                  for s in np.geomspace(smallest, max(largest, smallest), count)})
  if len(sizes) < 2:
    raise UsageError(
        f'probe.min_message_bytes={smallest} leaves no room below the largest message '
        f'({largest} bytes, rounded to multiples of {step}): a fit needs two sizes; '
        'lower it, or raise probe.max_message_bytes')
  return sizes


def participant_multiple(counts) -> int:
  """The least common multiple of the participant counts: a message of a
  multiple of it in elements splits evenly among any of them."""
  return math.lcm(*[max(1, c) for c in counts])
