"""A Dataset over lists of image files, decoded in parallel by tf.data.

Order and sharding come from `order.py` (numpy, a pure function of seed and
step); tf.data only decodes and augments the examples it is told to, in
parallel but in deterministic order, skipping files that fail to decode
(`step_batches.py`), and prefetches whole host batches.
"""

from collections.abc import Iterator

from input_pipeline import crops
from input_pipeline import host_augment
from input_pipeline import preprocess
from input_pipeline import step_batches
from input_pipeline import stream
from input_pipeline import tf_setup
from input_pipeline.augmentation import HostAugmentation, OFF
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
               seed: int, process_index: int = 0, process_count: int = 1,
               jpeg_decoding: crops.JpegDecoding = crops.EXACT,
               augmentation: HostAugmentation = OFF):
    if augment not in AUGMENTATIONS:
      raise ValueError(f'unknown augmentation {augment!r}; one of '
                       f'{AUGMENTATIONS}')
    super().__init__(
        class_names=class_names, num_train_examples=len(train),
        num_eval_examples=len(evaluation), batch_size=batch_size,
        eval_batch_size=eval_batch_size, seed=seed,
        process_index=process_index, process_count=process_count)
    tf_setup.keep_freed_heap_memory()  # this data set decodes every step
    self._train = train
    self._eval = evaluation
    self._image_size = image_size
    self._augment = augment
    self._snap_crops = snap_crops
    self._decoding = jpeg_decoding
    self._prefetch_batches = prefetch_batches
    self.augmentation = augmentation

  def _batches(self, examples: stream.Stream, load, local_batch: int,
               split: str) -> Iterator[Batch]:
    return step_batches.batches(
        examples, load, split=split, local_batch=local_batch,
        image_size=self._image_size, prefetch=self._prefetch_batches,
        skipped=self._skipped, unreadable=self._unreadable)

  def example_name(self, split: str, index: int) -> str:
    return (self._train if split == 'train' else self._eval).paths[index]

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
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
            example['flip'], snap_to_blocks=self._snap_crops,
            decoding=self._decoding)
      else:
        image = preprocess.augment(
            preprocess.resize(preprocess.decode(path), self._image_size),
            self._augment, tf.stack([seed, example['position']]))
      image = host_augment.apply(image, example, self.augmentation)
      return {'image': image, 'label': tf.gather(labels, example['index'])}

    return self._batches(
        stream.train_stream(self, start_step, self._image_size), load,
        self.local_batch_size, 'train')

  def eval_batches(self) -> Iterator[Batch]:
    paths = tf.constant(self._eval.paths)
    labels = tf.constant(self._eval.labels)
    self._skipped['eval'] = 0

    def load(example):
      image = preprocess.resize(
          preprocess.decode(tf.gather(paths, example['index'])),
          self._image_size)
      return {'image': image, 'label': tf.gather(labels, example['index'])}

    return self._batches(stream.eval_stream(self), load,
                         self.local_eval_batch_size, 'eval')
