"""A Dataset over lists of image files, decoded in parallel by tf.data.

Order and sharding come from `order.py` (numpy, a pure function of seed and
step); tf.data only decodes and augments the examples it is told to, in
parallel but in deterministic order, and prefetches whole host batches.
"""

import itertools
from collections.abc import Iterator

from input_pipeline import order
from input_pipeline import preprocess
from input_pipeline.dataset import Batch, Dataset
from input_pipeline.folder import ImageFiles
from input_pipeline.tf_setup import tf

AUTOTUNE = tf.data.AUTOTUNE


class FilesDataset(Dataset):
  """Training and evaluation batches read from image files."""

  def __init__(self, *, train: ImageFiles, evaluation: ImageFiles,
               class_names: list[str], image_size: int, augment: str,
               prefetch_batches: int, batch_size: int, eval_batch_size: int,
               seed: int, process_index: int = 0, process_count: int = 1):
    if augment not in preprocess.AUGMENTATIONS:
      raise ValueError(f'unknown augmentation {augment!r}; one of '
                       f'{preprocess.AUGMENTATIONS}')
    super().__init__(
        class_names=class_names, num_train_examples=len(train),
        num_eval_examples=len(evaluation), batch_size=batch_size,
        eval_batch_size=eval_batch_size, seed=seed,
        process_index=process_index, process_count=process_count)
    self._train = train
    self._eval = evaluation
    self._image_size = image_size
    self._augment = augment
    self._prefetch_batches = prefetch_batches

  def _finish(self, ds: tf.data.Dataset, local_batch: int) -> Iterator[Batch]:
    ds = ds.batch(local_batch, drop_remainder=True)
    if self._prefetch_batches > 0:
      ds = ds.prefetch(self._prefetch_batches)
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options).as_numpy_iterator()

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    stream = order.TrainOrder(self.num_train_examples, self.seed)

    def positions_and_indices():
      # One call per step: cheap Python that hands tf.data whole batches of
      # indices, so per-example work stays in TF's thread pool.
      for step in itertools.count(start_step):
        positions = order.train_positions(
            step, self.batch_size, self.process_index, self.process_count)
        yield positions, stream.example_indices(positions)

    spec = tf.TensorSpec([self.local_batch_size], tf.int64)
    ds = tf.data.Dataset.from_generator(
        positions_and_indices, output_signature=(spec, spec)).unbatch()
    paths = tf.constant(self._train.paths)
    labels = tf.constant(self._train.labels)
    seed = tf.constant(self.seed, tf.int64)

    def load(position, index):
      image = preprocess.resize(
          preprocess.decode(tf.gather(paths, index)), self._image_size)
      # Augmentation keyed by the stream position, not by the example or the
      # worker: the same step gives the same pixels on any resume and any
      # process count.
      image = preprocess.augment(
          image, self._augment, tf.stack([seed, position]))
      return {'image': image, 'label': tf.gather(labels, index)}

    ds = ds.map(load, num_parallel_calls=AUTOTUNE, deterministic=True)
    return self._finish(ds, self.local_batch_size)

  def eval_batches(self) -> Iterator[Batch]:
    indices, mask = order.eval_indices(
        self.num_eval_examples, self.eval_batch_size, self.process_index,
        self.process_count)
    paths = tf.constant(self._eval.paths)
    labels = tf.constant(self._eval.labels)

    def load(index, valid):
      image = preprocess.resize(
          preprocess.decode(tf.gather(paths, index)), self._image_size)
      return {'image': image, 'label': tf.gather(labels, index), 'mask': valid}

    ds = tf.data.Dataset.from_tensor_slices(
        (indices.reshape(-1), mask.reshape(-1)))
    ds = ds.map(load, num_parallel_calls=AUTOTUNE, deterministic=True)
    return self._finish(ds, self.local_eval_batch_size)
