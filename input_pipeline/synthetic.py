"""Random images and labels for benchmarks: no files, no decoding, no TF.

Example i of a split is a pure function of (seed, split, i), and it is read
through the same order and sharding as real data, so a batch is a pure
function of (seed, step) and resume, sharding and eval coverage behave as
for any other source. Images are windows into one random byte pool, so a
batch costs a memory copy, never random number generation: a benchmark
measures the model, not this module.
"""

from collections.abc import Iterator

import numpy as np

from input_pipeline import order
from input_pipeline.dataset import Batch, Dataset

# Distinct window offsets into the pool, i.e. distinct images per split.
_POOL_SLACK = 1 << 16


class _Split:
  """Image and label of every example of one split, made on demand."""

  def __init__(self, num_examples: int, image_size: int, num_classes: int,
               seed: int, salt: int):
    rng = np.random.default_rng([seed, salt])
    self.image_shape = (image_size, image_size, 3)
    pixels = int(np.prod(self.image_shape))
    pool = rng.integers(0, 256, pixels + _POOL_SLACK, dtype=np.uint8)
    self._windows = np.lib.stride_tricks.sliding_window_view(pool, pixels)
    self._offsets = rng.integers(0, _POOL_SLACK + 1, num_examples)
    self.labels = rng.integers(0, num_classes, num_examples).astype(np.int32)

  def images(self, indices: np.ndarray) -> np.ndarray:
    return self._windows[self._offsets[indices]].reshape(
        (len(indices),) + self.image_shape)


class SyntheticDataset(Dataset):
  """uint8 noise images with uniform random labels."""

  def __init__(self, *, num_examples: int, num_classes: int, image_size: int,
               batch_size: int, eval_batch_size: int, seed: int,
               process_index: int = 0, process_count: int = 1):
    super().__init__(
        class_names=[str(i) for i in range(num_classes)],
        num_train_examples=num_examples, num_eval_examples=num_examples,
        batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed,
        process_index=process_index, process_count=process_count)
    self._train = _Split(num_examples, image_size, num_classes, seed, salt=0)
    self._eval = _Split(num_examples, image_size, num_classes, seed, salt=1)

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    stream = order.TrainOrder(self.num_train_examples, self.seed)
    step = start_step
    while True:
      indices = stream.example_indices(order.train_positions(
          step, self.batch_size, self.process_index, self.process_count))
      yield {'image': self._train.images(indices),
             'label': self._train.labels[indices]}
      step += 1

  def eval_batches(self) -> Iterator[Batch]:
    indices, mask = order.eval_indices(
        self.num_eval_examples, self.eval_batch_size, self.process_index,
        self.process_count)
    for batch_indices, batch_mask in zip(indices, mask):
      yield {'image': self._eval.images(batch_indices),
             'label': self._eval.labels[batch_indices],
             'mask': batch_mask}
