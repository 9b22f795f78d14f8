"""Per-example augmentation randomness: a pure function of (seed, position).

Keyed by the stream position, not by the example or the process, so the same
step gives the same pixels on any resume and any process count. Computed in
numpy for a whole step at once: in the per-example TensorFlow function every
op costs microseconds of executor time, which at thousands of images a second
on a few cores is a visible share of the input pipeline.
"""

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FLIP_SALT = np.uint64(0xD1B54A32D192ED03)


def _mix(x: np.ndarray) -> np.ndarray:
  """SplitMix64's finaliser: a bijection of uint64 that scrambles every bit."""
  x = x + _GOLDEN
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def crop_seeds_and_flips(seed: int, positions: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
  """(int64 [N, 2] seeds for stateless crop ops, bool [N] flips)."""
  with np.errstate(over='ignore'):  # uint64 arithmetic wraps on purpose
    key = _mix(_mix(np.full(positions.shape, seed, np.uint64)) ^
               positions.astype(np.uint64))
    first, second = _mix(key), _mix(key + np.uint64(1))
    flips = (_mix(key ^ _FLIP_SALT) >> np.uint64(63)) == 1
  # The top bit dropped: stateless ops take int64 seeds.
  seeds = np.stack([first >> np.uint64(1), second >> np.uint64(1)], axis=-1)
  return seeds.astype(np.int64), flips
