"""Cheap checks of `config.data`, run before any heavy import.

No TensorFlow here: the trainer calls `check_data_config` right after parsing
flags, so that a wrong path fails in a second with one line, not after
minutes of imports and device start-up.
"""

import os

from input_pipeline import shapes
from input_pipeline import tfds_check
from input_pipeline.errors import DataError

SOURCES = ('shapes', 'folder', 'synthetic', 'tfds')
# Here rather than in preprocess.py, which needs TensorFlow. The first three
# work on a decoded image at its final size; inception_crop works on the
# encoded image (crops.py).
RESIZED_AUGMENTATIONS = ('none', 'flip', 'crop_flip')
AUGMENTATIONS = RESIZED_AUGMENTATIONS + ('inception_crop',)


def _check_splits(root: str, splits: tuple[str, str]) -> None:
  for split in splits:
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
      raise DataError(f'missing folder {split_dir}: put images in '
                      f'{split_dir}/<class>/*.jpg')


def check_data_config(data_config) -> None:
  """Raises DataError, with a one-line message, if `config.data` cannot work.

  Checks values and the presence of folders; listing and decoding images is
  left to `create_dataset`. For `shapes` an absent cache is fine: it is
  generated on first use; for `tfds` an unprepared data set is fine if
  data.manual_dir holds what it is prepared from.
  """
  source = data_config.source
  if source not in SOURCES:
    raise DataError(f'unknown data.source={source!r}; one of '
                    f'{", ".join(SOURCES)}')
  if data_config.image_size <= 0:
    raise DataError(
        f'data.image_size must be positive, got {data_config.image_size}')
  if data_config.augment not in AUGMENTATIONS:
    raise DataError(f'unknown data.augment={data_config.augment!r}; one of '
                    f'{", ".join(AUGMENTATIONS)}')
  if data_config.prefetch_batches < 0:
    raise DataError('data.prefetch_batches must be >= 0, got '
                    f'{data_config.prefetch_batches}')

  if source == 'synthetic':
    if data_config.num_synthetic_examples <= 0:
      raise DataError('data.num_synthetic_examples must be positive, got '
                      f'{data_config.num_synthetic_examples}')
    if data_config.num_synthetic_classes <= 0:
      raise DataError('data.num_synthetic_classes must be positive, got '
                      f'{data_config.num_synthetic_classes}')
  elif source == 'folder':
    root = data_config.dir
    if not root:
      raise DataError(
          "data.source='folder' needs data.dir: a directory with "
          f'<dir>/{data_config.train_split}/<class>/*.jpg and '
          f'<dir>/{data_config.eval_split}/<class>/*.jpg')
    root = os.path.expanduser(root)
    if not os.path.isdir(root):
      raise DataError(
          f'data.dir {root} does not exist: make it with '
          f'{root}/{data_config.train_split}/<class>/*.jpg and '
          f'{root}/{data_config.eval_split}/<class>/*.jpg')
    _check_splits(root, (data_config.train_split, data_config.eval_split))
  elif source == 'tfds':
    tfds_check.check(data_config)
  elif source == 'shapes':
    root = os.path.expanduser(data_config.dir or shapes.default_dir())
    # Absent or empty: generated on first use. Otherwise it must look like
    # a generated data set.
    if os.path.isdir(root) and os.listdir(root):
      _check_splits(root, shapes.SPLITS)
    elif os.path.exists(root) and not os.path.isdir(root):
      raise DataError(f'data.dir {root} is a file, not a folder for the '
                      'shapes data set')
