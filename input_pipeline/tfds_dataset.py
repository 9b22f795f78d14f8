"""A Dataset over a prepared tfds image-classification data set (ImageNet).

The stream is the one of every file-backed source: `order.py` picks the
example indices of each step (a pure function of seed and step, one disjoint
share per process), Python reads exactly those raw records, and tf.data
parses, decodes and crops them in parallel (`crops.py`), skipping the ones
that fail (`step_batches.py`). Nothing is shuffled or skipped in
tf.data, so resuming at step k costs nothing: the generator starts at k.
"""

from collections.abc import Iterator

import numpy as np

from input_pipeline import crops
from input_pipeline import host_augment
from input_pipeline import preprocess
from input_pipeline import step_batches
from input_pipeline import stream
from input_pipeline import tf_setup
from input_pipeline.augmentation import HostAugmentation, OFF
from input_pipeline.dataset import Batch, Dataset
from input_pipeline.tf_setup import tf
from input_pipeline.tfds_source import TfdsSource
from input_pipeline.validate import AUGMENTATIONS


class TfdsDataset(Dataset):
  """Training and evaluation batches read from a tfds data source."""

  def __init__(self, *, source: TfdsSource, train_split: str, eval_split: str,
               image_size: int, augment: str, snap_crops: bool,
               eval_crop_fraction: float,
               jpeg_decoding: crops.JpegDecoding = crops.EXACT,
               prefetch_batches: int, batch_size: int, eval_batch_size: int,
               seed: int, process_index: int = 0, process_count: int = 1,
               augmentation: HostAugmentation = OFF):
    if augment not in AUGMENTATIONS:
      raise ValueError(f'unknown augmentation {augment!r}; one of '
                       f'{AUGMENTATIONS}')
    tf_setup.keep_freed_heap_memory()  # this data set decodes every step
    self._source = source
    self._split_names = {'train': train_split, 'eval': eval_split}
    self._train = source.records(train_split)
    self._eval = source.records(eval_split)
    # The record counts come from the readers, not from the split metadata,
    # which a split slice or tfds.testing.mock_data may leave empty.
    super().__init__(
        class_names=source.class_names, num_train_examples=len(self._train),
        num_eval_examples=len(self._eval), batch_size=batch_size,
        eval_batch_size=eval_batch_size, seed=seed,
        process_index=process_index, process_count=process_count)
    self._image_size = image_size
    self._augment = augment
    self._snap_crops = snap_crops
    self._decoding = jpeg_decoding
    self._eval_crop_fraction = eval_crop_fraction
    self._prefetch_batches = prefetch_batches
    self._jpeg_only = source.is_jpeg_only()
    self.augmentation = augmentation

  def example_name(self, split: str, index: int) -> str:
    """'train[1234]': the split's record, as a tfds split slice names it."""
    return f'{self._split_names[split]}[{index}]'

  def _eval_view(self, encoded: tf.Tensor) -> tf.Tensor:
    return crops.center_crop(encoded, self._image_size,
                             self._eval_crop_fraction, self._jpeg_only,
                             self._decoding)

  def train_batches(self, start_step: int = 0) -> Iterator[Batch]:
    seed = tf.constant(self.seed, tf.int64)

    def load(example):
      encoded, label = self._source.parse(example['record'])
      # Randomness keyed by the stream position, not by the example or the
      # process: the same step gives the same pixels on any resume and any
      # process count.
      if self._augment == 'inception_crop':
        image = crops.inception_crop(
            encoded, self._image_size, example['crop_seed'], example['flip'],
            self._jpeg_only, self._snap_crops, self._decoding)
      else:
        image = preprocess.augment(self._eval_view(encoded), self._augment,
                                   tf.stack([seed, example['position']]))
      image = host_augment.apply(image, example, self.augmentation)
      return {'image': image, 'label': label}

    return step_batches.batches(
        _with_records(stream.train_stream(self, start_step, self._image_size),
                      self._train),
        load, split='train', local_batch=self.local_batch_size,
        image_size=self._image_size, prefetch=self._prefetch_batches,
        skipped=self._skipped, unreadable=self._unreadable)

  def eval_batches(self) -> Iterator[Batch]:
    self._skipped['eval'] = 0

    def load(example):
      encoded, label = self._source.parse(example['record'])
      return {'image': self._eval_view(encoded), 'label': label}

    # Padding slots read example 0 again; their mask hides it.
    return step_batches.batches(
        _with_records(stream.eval_stream(self), self._eval), load,
        split='eval', local_batch=self.local_eval_batch_size,
        image_size=self._image_size, prefetch=self._prefetch_batches,
        skipped=self._skipped, unreadable=self._unreadable)


def _with_records(examples: stream.Stream, records) -> stream.Stream:
  """`examples` plus the raw record of each one: cheap Python once a step."""
  local = examples.spec['index'].shape[0]

  def inputs(i: int) -> dict[str, np.ndarray]:
    step = examples.inputs(i)
    return {**step, 'record': _read(records, step['index'])}
  return stream.Stream(
      inputs, {**examples.spec, 'record': tf.TensorSpec([local], tf.string)},
      examples.count)


def _read(records, indices: np.ndarray) -> np.ndarray:
  """Raw records at `indices`; b'' (parsed as unreadable) for failed reads."""
  keys = [int(i) for i in indices]
  try:
    return np.array(records.__getitems__(keys), dtype=object)
  except Exception:  # pylint: disable=broad-except
    # One bad chunk must not take the step down: retry record by record, so
    # that only the records that fail become unreadable examples.
    out = []
    for key in keys:
      try:
        out.append(records[key])
      except Exception:  # pylint: disable=broad-except
        out.append(b'')
    return np.array(out, dtype=object)
