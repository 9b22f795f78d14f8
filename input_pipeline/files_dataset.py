"""A Dataset over lists of image files, decoded in parallel by tf.data.

Order and sharding come from `order.py` (numpy, a pure function of seed and
step); tf.data only decodes and augments the examples it is told to, in
parallel but in deterministic order, skipping files that fail to decode
(`step_batches.py`), and prefetches whole host batches.
"""

from collections.abc import Iterator

import numpy as np

from input_pipeline import crops
from input_pipeline import example_seeds
from input_pipeline import order
from input_pipeline import preprocess
from input_pipeline import step_batches
from input_pipeline.dataset import Batch, Dataset
from input_pipeline.folder import ImageFiles
from input_pipeline.tf_setup import tf
from input_pipeline.validate import AUGMENTATIONS


class FilesDataset(Dataset):
  """Training and evaluation batches read from image files."""

  def __init__(self, *, train: ImageFiles, evaluation: ImageFiles,
               class_names: list[str], image_size: int, augment: str,
               snap_crops: bool,
               prefetch_batches: int, batch_size: int, eval_batch_size: int,
               seed: int, process_index: int = 0, process_count: int = 1):
    if augment not in AUGMENTATIONS:
      raise ValueError(f'unknown augmentation {augment!r}; one of '
                       f'{AUGMENTATIONS}')
    super().__init__(
        class_names=class_names, num_train_examples=len(train),
        num_eval_examples=len(evaluation), batch_size=batch_size,
        eval_batch_size=eval_batch_size, seed=seed,
        process_index=process_index, process_count=process_count)
    self._train = train
    self._eval = evaluation
    self._image_size = image_size
    self._augment = augment
    self._snap_crops = snap_crops
    self._prefetch_batches = prefetch_batches

  def _batches(self, steps: step_batches.Steps, load, local_batch: int,
               split: str, expected) -> Iterator[Batch]:
    return step_batches.batches(
        steps, load, split=split, local_batch=local_batch,
        image_size=self._image_size, prefetch=self._prefetch_batches,
        skipped=self._skipped, expected=expected)

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    stream = order.TrainOrder(self.num_train_examples, self.seed)

    def inputs(i: int) -> dict[str, np.ndarray]:
      # One call per step: cheap Python that hands tf.data whole batches of
      # indices, so per-example work stays in TF's thread pool.
      positions = order.train_positions(
          start_step + i, self.batch_size, self.process_index,
          self.process_count)
      crop_seeds, flips = example_seeds.crop_seeds_and_flips(
          self.seed, positions)
      return {'position': positions, 'crop_seed': crop_seeds, 'flip': flips,
              'index': stream.example_indices(positions)}

    local = self.local_batch_size
    steps = step_batches.Steps(inputs, {
        'position': tf.TensorSpec([local], tf.int64),
        'index': tf.TensorSpec([local], tf.int64),
        'crop_seed': tf.TensorSpec([local, 2], tf.int64),
        'flip': tf.TensorSpec([local], tf.bool)})
    paths = tf.constant(self._train.paths)
    labels = tf.constant(self._train.labels)
    seed = tf.constant(self.seed, tf.int64)

    def load(example):
      path = tf.gather(paths, example['index'])
      # Augmentation keyed by the stream position, not by the example or the
      # worker: the same step gives the same pixels on any resume and any
      # process count.
      if self._augment == 'inception_crop':
        image = crops.inception_crop(
            tf.io.read_file(path), self._image_size, example['crop_seed'],
            example['flip'], snap_to_blocks=self._snap_crops)
      else:
        image = preprocess.augment(
            preprocess.resize(preprocess.decode(path), self._image_size),
            self._augment, tf.stack([seed, example['position']]))
      return {'image': image, 'label': tf.gather(labels, example['index'])}

    return self._batches(steps, load, local, 'train',
                         step_batches.train_expected(self, start_step))

  def eval_batches(self) -> Iterator[Batch]:
    indices, mask = order.eval_indices(
        self.num_eval_examples, self.eval_batch_size, self.process_index,
        self.process_count)
    paths = tf.constant(self._eval.paths)
    labels = tf.constant(self._eval.labels)
    self._skipped['eval'] = 0

    def load(example):
      image = preprocess.resize(
          preprocess.decode(tf.gather(paths, example['index'])),
          self._image_size)
      return {'image': image, 'label': tf.gather(labels, example['index'])}

    local = self.local_eval_batch_size
    steps = step_batches.Steps(
        lambda j: {'index': indices[j], 'mask': mask[j]},
        {'index': tf.TensorSpec([local], tf.int64),
         'mask': tf.TensorSpec([local], tf.bool)}, count=len(indices))
    return self._batches(steps, load, local, 'eval',
                         lambda j: (indices[j], mask[j]))
