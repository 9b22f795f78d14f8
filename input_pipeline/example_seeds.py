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


def _keys(seed: int, positions: np.ndarray) -> np.ndarray:
  """uint64 [N]: one well-mixed key per (seed, position)."""
  return _mix(_mix(np.full(positions.shape, seed, np.uint64)) ^
              positions.astype(np.uint64))


def _stateless_seeds(key: np.ndarray) -> np.ndarray:
  first, second = _mix(key), _mix(key + np.uint64(1))
  # The top bit dropped: stateless ops take int64 seeds.
  return np.stack([first >> np.uint64(1), second >> np.uint64(1)],
                  axis=-1).astype(np.int64)


def crop_seeds_and_flips(seed: int, positions: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
  """(int64 [N, 2] seeds for stateless crop ops, bool [N] flips)."""
  with np.errstate(over='ignore'):  # uint64 arithmetic wraps on purpose
    key = _keys(seed, positions)
    flips = (_mix(key ^ _FLIP_SALT) >> np.uint64(63)) == 1
    return _stateless_seeds(key), flips


def uniforms(seed: int, positions: np.ndarray, salt: int, count: int
             ) -> np.ndarray:
  """float64 [N, count] in [0, 1): independent draws of each position.

  `salt` keeps the draws of one augmentation apart from every other's (and
  from the crop seeds and flips) at the same position.
  """
  with np.errstate(over='ignore'):
    key = _mix(_keys(seed, positions) ^ np.uint64(salt))
    bits = _mix(key[:, None] + np.arange(count, dtype=np.uint64)[None, :])
  # The top 53 bits: every double in [0, 1) on the 2**-53 grid.
  return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def stateless_seeds(seed: int, positions: np.ndarray, salt: int
                    ) -> np.ndarray:
  """int64 [N, 2] seeds for TensorFlow's stateless random ops, one per
  position, apart from every other salt's."""
  with np.errstate(over='ignore'):
    return _stateless_seeds(_mix(_keys(seed, positions) ^ np.uint64(salt)))
