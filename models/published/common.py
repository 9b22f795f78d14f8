"""What every layout module returns, and the checks they share."""

import dataclasses
import math

import numpy as np


class LayoutError(ValueError):
  """A file that does not fit the model: one line naming the tensor."""


@dataclasses.dataclass
class Converted:
  """A file's tensors as this project's parameters.

  assigned: our flat path -> (the file's tensor name(s), the array in our layout).
  ignored: the file's tensor name -> why it is not used.
  """
  assigned: dict = dataclasses.field(default_factory=dict)
  ignored: dict = dataclasses.field(default_factory=dict)

  def put(self, ours: str, source: str, array: np.ndarray) -> None:
    """Fills `ours` from `source`; a path filled twice is a LayoutError."""
    if ours in self.assigned:
      raise LayoutError(f'{ours} is filled twice, by {self.assigned[ours][0]} and by '
                        f'{source} (duplicated blocks?)')
    self.assigned[ours] = (source, np.asarray(array))


def resample_position_embedding(table: np.ndarray, tokens: int, source: str) -> np.ndarray:
  """A ViT's [1, 1 + G*G, D] position embedding (class token first) for
  `tokens` = 1 + g*g positions: the class token's row kept, the G x G grid
  resampled bilinearly (jax.image.resize, half-pixel centres) to g x g."""
  import jax  # pylint: disable=g-import-not-at-top

  have = table.shape[1] - 1
  side, new_side = math.isqrt(have), math.isqrt(tokens - 1)
  if side * side != have or new_side * new_side != tokens - 1:
    raise LayoutError(f'{source} has {table.shape[1]} positions, not a class token and '
                      f'a square grid for {tokens}')
  grid = table[0, 1:].reshape(side, side, -1)
  resized = np.asarray(jax.image.resize(grid, (new_side, new_side, grid.shape[-1]),
                                        method='bilinear'), table.dtype)
  return np.concatenate([table[:, :1], resized.reshape(1, -1, grid.shape[-1])], axis=1)
