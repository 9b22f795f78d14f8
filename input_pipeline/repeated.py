"""Repeated augmentation (Hoffer et al. 2020; DeiT's RASampler): each image of
an epoch's order appears K times in the stream, each copy augmented anew.

As DeiT's sampler does, the epoch's permutation is repeated and truncated so
that an epoch still has N positions: an epoch covers its first ceil(N / K)
images, K copies each. The copies of an image share a global batch, as
they do in DeiT, but not neighbouring slots: the stream is laid out in
blocks of K * G positions (G = batch_size // K), holding G images, first
copy of each, then the second copy of each, and so on. Copies sit G slots
apart, so they land on different devices, and mixup's partner (the next
example, trainer/step_functions.py) is another image. At the end of an
epoch, the shorter last block uses ceil(positions left / K) images; the
last few get fewer copies when K does not divide what is left.

Everything is a function of (seed, position) given N, K and the batch size,
like order.py: resuming, and any number of processes (each reads its
contiguous share of the positions), see the same stream.
"""

import numpy as np

from input_pipeline import order


def repeated_ranks(offsets: np.ndarray, num_examples: int, repeats: int,
                   group: int) -> np.ndarray:
  """The rank in the epoch's permutation of the image at each epoch offset."""
  block = repeats * group
  full_blocks = num_examples // block
  tail_group = -(-(num_examples - full_blocks * block) // repeats)
  blocks, within = np.divmod(offsets, block)
  # The last, partial block spreads its copies over its own, fewer images.
  images_per_block = np.where(blocks < full_blocks, group, max(tail_group, 1))
  return blocks * group + within % images_per_block


class RepeatedOrder:
  """order.TrainOrder with each image repeated (see the module docstring)."""

  def __init__(self, num_examples: int, seed: int, repeats: int,
               batch_size: int):
    self._order = order.TrainOrder(num_examples, seed)
    self.num_examples = num_examples
    self.repeats = repeats
    self.group = max(1, batch_size // repeats)

  def example_indices(self, positions: np.ndarray) -> np.ndarray:
    """Example index at each stream position (a batch may straddle epochs)."""
    epochs, offsets = np.divmod(positions, self.num_examples)
    ranks = repeated_ranks(offsets, self.num_examples, self.repeats,
                           self.group)
    indices = np.empty_like(positions)
    for epoch in np.unique(epochs):
      here = epochs == epoch
      indices[here] = self._order.permutation(int(epoch))[ranks[here]]
    return indices


def train_order(num_examples: int, seed: int, repeats: int, batch_size: int):
  """The training order: order.TrainOrder itself when repeats <= 1."""
  if repeats <= 1:
    return order.TrainOrder(num_examples, seed)
  return RepeatedOrder(num_examples, seed, repeats, batch_size)
