"""A prepared tfds data set, opened for random access to its raw records.

Random access is what lets `order.py` decide the training stream: record i
of a split is read on demand, so a step's examples are a pure function of
(seed, step) and each process reads only its own. Array-record data sets
(the format this module prepares) have it through `builder.as_data_source`;
TFRecord data sets (tfds's default format, and most existing prepared
copies of ImageNet) get it from `tfrecord_index`.

Records stay serialized here: parsing and decoding happen in tf.data, where
they run in parallel and where a corrupt record can be skipped.
"""

import dataclasses
import os
from typing import Any

from absl import logging

from input_pipeline import tfds_check
from input_pipeline import tfrecord_index
from input_pipeline.errors import DataError
from input_pipeline.tf_setup import tf
import tensorflow_datasets as tfds  # pylint: disable=g-bad-import-order

# Data sets prepared here are written as array_record: random access with
# no index to build.
PREPARED_FILE_FORMAT = 'array_record'


@dataclasses.dataclass
class TfdsSource:
  """What the pipeline needs from a tfds data set."""
  builder: Any  # tfds.core.DatasetBuilder
  image_key: str
  label_key: str
  class_names: list[str]

  def parse(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(encoded image bytes, int32 label) of one serialized record."""
    example = self.builder.info.features.deserialize_example(
        record, decoders={self.image_key: tfds.decode.SkipDecoding()})
    return example[self.image_key], tf.cast(example[self.label_key], tf.int32)

  def is_jpeg_only(self) -> bool:
    feature = self.builder.info.features[self.image_key]
    return getattr(feature, 'encoding_format', None) == 'jpeg'

  def records(self, split: str):
    """The split as a sequence of serialized records (len, __getitems__)."""
    splits = self.builder.info.splits
    if split == 'val' and 'val' not in splits and 'validation' in splits:
      # 'val' is data.eval_split's default, made for folders; tfds calls the
      # split 'validation'.
      split = 'validation'
    try:
      return OneByOneReads(self.builder.as_data_source(
          split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES))
    except NotImplementedError:
      pass  # not a random-access format: TFRecord
    except (KeyError, ValueError) as e:
      raise DataError(self._bad_split(split, e)) from e
    try:
      instructions = self.builder.info.splits[split].file_instructions
    except (KeyError, ValueError) as e:
      raise DataError(self._bad_split(split, e)) from e
    logging.info('%s is TFRecord: indexing record offsets on first use (an '
                 'array_record copy needs no index: `tfds convert_format`)',
                 self.builder.name)
    return tfrecord_index.TFRecordIndex(tfrecord_index.shards_of(instructions))

  def _bad_split(self, split: str, error: Exception) -> str:
    known = ', '.join(self.builder.info.splits) or 'unknown'
    return (f'tfds data set {self.builder.name} has no split {split!r} '
            f'(splits: {known}): set data.train_split / data.eval_split '
            f'({type(error).__name__}: {str(error).splitlines()[0]})')


class OneByOneReads:
  """A random-access data source whose batched reads are done one by one.

  array_record's batched read fans a step's records out over a thread pool.
  On a host whose cores are all busy decoding JPEGs, that costs 2.5 times the
  CPU of reading them in turn (0.11 against 0.04 ms per 90 KB record, measured
  on two cores), and the decoders are what wait for it.
  """

  def __init__(self, source):
    self._source = source

  def __len__(self) -> int:
    return len(self._source)

  def __getitem__(self, index: int) -> bytes:
    return self._source[index]

  def __getitems__(self, indices) -> list[bytes]:
    return [self._source[i] for i in indices]


def _prepare(builder, data_config, root: str, process_count: int) -> None:
  """Prepares the data set into `root` from data.manual_dir (hours for ImageNet)."""
  manual = os.path.expanduser(data_config.manual_dir)
  if not data_config.manual_dir:
    raise DataError(
        f'no prepared tfds data set {data_config.name} in {root}: set data.dir'
        ' to the tfds data dir that holds it, or data.manual_dir to the '
        'downloaded archives to prepare it')
  if process_count > 1:
    # Every process would prepare its own copy into the same folder.
    raise DataError(
        f'{data_config.name} is not prepared in {root}: prepare it once with '
        'a single-process run (or `tfds build '
        f'{data_config.name} --data_dir={root} --manual_dir={manual} '
        f'--file_format={PREPARED_FILE_FORMAT}`), then start the '
        f'{process_count} processes')
  logging.info('Preparing %s into %s from %s; this runs once and can take '
               'hours for ImageNet', data_config.name, root, manual)
  builder.download_and_prepare(
      file_format=PREPARED_FILE_FORMAT,
      download_config=tfds.download.DownloadConfig(manual_dir=manual))


def _keys(builder) -> tuple[str, str]:
  """The image and label feature names ('image', 'label' for ImageNet)."""
  keys = builder.info.supervised_keys
  if (isinstance(keys, tuple) and len(keys) == 2 and
      all(isinstance(k, str) for k in keys)):
    return keys
  return 'image', 'label'


def open_source(data_config, process_count: int = 1) -> TfdsSource:
  """The data set of `data_config` (data.name, data.dir, data.manual_dir).

  Raises:
    DataError: tfds knows no such data set, or it is not prepared and cannot
      be prepared here, or it is not an image-classification data set.
  """
  root = tfds_check.data_dir(data_config)
  try:
    builder = tfds.builder(data_config.name, data_dir=root)
  except Exception as e:  # tfds raises several types for a name it lacks
    raise DataError(
        f'tfds cannot open {data_config.name} in {root}: '
        f'{str(e).splitlines()[0] if str(e) else type(e).__name__}') from e
  if not builder.is_prepared():
    _prepare(builder, data_config, root, process_count)
  image_key, label_key = _keys(builder)
  features = builder.info.features
  if image_key not in features or label_key not in features or not hasattr(
      features[label_key], 'names'):
    raise DataError(
        f'{data_config.name} is not an image-classification data set: it '
        f'needs an {image_key!r} image and a {label_key!r} class label, and '
        f'has {", ".join(features.keys())}')
  return TfdsSource(builder=builder, image_key=image_key, label_key=label_key,
                    class_names=list(features[label_key].names))
