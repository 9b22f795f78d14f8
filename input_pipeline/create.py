"""Builds the Dataset that `config.data` describes."""

import os

from input_pipeline import augmentation
from input_pipeline import folder
from input_pipeline import shapes
from input_pipeline import synthetic
from input_pipeline.dataset import Dataset
from input_pipeline.errors import DataError
from input_pipeline.validate import check_data_config


def create_dataset(data_config, *, batch_size: int, eval_batch_size: int,
                   seed: int, process_index: int = 0, process_count: int = 1,
                   class_map_path: str | None = None) -> Dataset:
  """This process's share of the data set of `data_config` (`config.data`).

  Args:
    data_config: the `config.data` block.
    batch_size: global training batch (all processes).
    eval_batch_size: global evaluation batch (all processes).
    seed: the run's seed; training order and augmentation derive from it,
      and the held-out images of data.val_fraction.
    process_index: this process, in [0, process_count).
    process_count: processes that share each global batch.
    class_map_path: JSON class -> label map. Folder and shapes: used if it
      exists, written otherwise; None: labels are the sorted class folders.
      tfds: the data set fixes the labels, and a map that disagrees is an
      error.

  Raises:
    DataError: the data cannot be used (see `check_data_config`).
    ValueError: a batch size is not divisible by `process_count`.
  """
  check_data_config(data_config)
  common = dict(
      batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed,
      process_index=process_index, process_count=process_count)
  if data_config.source == 'synthetic':
    # Noise for benchmarks: neither data.augment nor the host augmentation
    # keys apply.
    return synthetic.SyntheticDataset(
        num_examples=data_config.num_synthetic_examples,
        num_classes=data_config.num_synthetic_classes,
        image_size=data_config.image_size, **common)

  if data_config.source == 'tfds':
    return _create_tfds(data_config, class_map_path, **common)

  if data_config.source == 'shapes':
    class_names, train, evaluation = folder.read_folder(
        shapes.ensure(data_config.dir or None), *shapes.SPLITS, class_map_path)
  elif data_config.val_fraction:
    class_names, train, evaluation = folder.split_folder(
        os.path.expanduser(data_config.dir), data_config.val_fraction, seed,
        class_map_path)
  else:
    class_names, train, evaluation = folder.read_folder(
        os.path.expanduser(data_config.dir), data_config.train_split,
        data_config.eval_split, class_map_path)
  # Imported here: TensorFlow takes seconds to import, and only file-backed
  # sources need it.
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import files_dataset
  return files_dataset.FilesDataset(
      train=train, evaluation=evaluation, class_names=class_names,
      image_size=data_config.image_size, augment=data_config.augment,
      snap_crops=data_config.snap_crops_to_jpeg_blocks,
      jpeg_decoding=jpeg_decoding(data_config),
      augmentation=augmentation.from_data_config(data_config),
      prefetch_batches=data_config.prefetch_batches, **common)


def jpeg_decoding(data_config):
  """crops.JpegDecoding from data.jpeg_scaled_decode; imports TensorFlow."""
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import crops
  return crops.JpegDecoding(
      scaled_to=data_config.image_size if data_config.jpeg_scaled_decode else 0)


def _create_tfds(data_config, class_map_path: str | None, **common) -> Dataset:
  # Imported here: TensorFlow and tfds take seconds to import.
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import tfds_dataset, tfds_source
  source = tfds_source.open_source(data_config, common['process_count'])
  if class_map_path and os.path.exists(class_map_path):
    saved = folder.read_class_map(class_map_path)
    if saved != {name: i for i, name in enumerate(source.class_names)}:
      raise DataError(
          f'the classes of {data_config.name} differ from those saved in '
          f'{class_map_path}: this work dir was trained on other data')
  return tfds_dataset.TfdsDataset(
      source=source, train_split=data_config.train_split,
      eval_split=data_config.eval_split, image_size=data_config.image_size,
      augment=data_config.augment,
      snap_crops=data_config.snap_crops_to_jpeg_blocks,
      eval_crop_fraction=data_config.eval_crop_fraction,
      jpeg_decoding=jpeg_decoding(data_config),
      augmentation=augmentation.from_data_config(data_config),
      prefetch_batches=data_config.prefetch_batches, **common)
