"""Builds the Dataset that `config.data` describes."""

import os

from input_pipeline import folder
from input_pipeline import shapes
from input_pipeline import synthetic
from input_pipeline.dataset import Dataset
from input_pipeline.validate import check_data_config


def create_dataset(data_config, *, batch_size: int, eval_batch_size: int,
                   seed: int, process_index: int = 0, process_count: int = 1,
                   class_map_path: str | None = None) -> Dataset:
  """This process's share of the data set of `data_config` (`config.data`).

  Args:
    data_config: the `config.data` block.
    batch_size: global training batch (all processes).
    eval_batch_size: global evaluation batch (all processes).
    seed: the run's seed; training order and augmentation derive from it.
    process_index: this process, in [0, process_count).
    process_count: processes that share each global batch.
    class_map_path: JSON class -> label map (folder and shapes): used if it
      exists, written otherwise. None: labels are the sorted class folders.

  Raises:
    DataError: the data cannot be used (see `check_data_config`).
    ValueError: a batch size is not divisible by `process_count`.
  """
  check_data_config(data_config)
  common = dict(
      batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed,
      process_index=process_index, process_count=process_count)
  if data_config.source == 'synthetic':
    return synthetic.SyntheticDataset(
        num_examples=data_config.num_synthetic_examples,
        num_classes=data_config.num_synthetic_classes,
        image_size=data_config.image_size, **common)

  if data_config.source == 'shapes':
    root = shapes.ensure(data_config.dir or None)
    train_split, eval_split = shapes.SPLITS
  else:
    root = os.path.expanduser(data_config.dir)
    train_split, eval_split = data_config.train_split, data_config.eval_split
  class_names, train, evaluation = folder.read_folder(
      root, train_split, eval_split, class_map_path)
  # Imported here: TensorFlow takes seconds to import, and only file-backed
  # sources need it.
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import files_dataset
  return files_dataset.FilesDataset(
      train=train, evaluation=evaluation, class_names=class_names,
      image_size=data_config.image_size, augment=data_config.augment,
      prefetch_batches=data_config.prefetch_batches, **common)
