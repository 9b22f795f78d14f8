"""Cheap checks of `config.data`, run before any heavy import.

No TensorFlow here: the trainer calls `check_data_config` right after parsing
flags, so that a wrong path fails in a second with one line, not after
minutes of imports and device start-up.
"""

import os

from input_pipeline import folder
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


def _check_folder(data_config) -> None:
  train, val = data_config.train_split, data_config.eval_split
  fraction = data_config.val_fraction
  layout = ('<dir>/<class>/*.jpg' if fraction else
            f'<dir>/{train}/<class>/*.jpg and <dir>/{val}/<class>/*.jpg')
  if not data_config.dir:
    raise DataError(f"data.source='folder' needs data.dir: a directory with "
                    f'{layout}')
  root = os.path.expanduser(data_config.dir)
  if not os.path.isdir(root):
    raise DataError(f'data.dir {root} does not exist: make it with '
                    f'{layout.replace("<dir>", root)}')
  present = [s for s in (train, val) if os.path.isdir(os.path.join(root, s))]
  if fraction:
    # A class could be called "train"; far likelier, the user forgot to
    # set the fraction back to 0. Either way, guessing would be wrong.
    if present:
      raise DataError(
          f'data.val_fraction={fraction} splits the class folders directly '
          f'in {root}, but it has {" and ".join(s + "/" for s in present)}: '
          'set data.val_fraction=0 to use its splits, or point data.dir at '
          'a folder of class folders')
    if not folder.list_classes(root):
      raise DataError(f'no class folders in {root}: expected '
                      f'{root}/<class>/*.jpg or *.png')
    too_few = folder.classes_too_small_to_split(root)
    if too_few:
      raise DataError(folder.too_few_message(root, fraction, too_few))
    return
  if train not in present:
    raise DataError(
        f'no {train}/ folder in {root}: add {root}/{train}/<class>/*.jpg and '
        f'{root}/{val}/<class>/*.jpg, or set data.val_fraction (e.g. 0.1) to '
        f'hold out part of each class folder in {root} for evaluation')
  _check_splits(root, (train, val))


def check_data_config(data_config) -> None:
  """Raises DataError, with a one-line message, if `config.data` cannot work.

  Checks values and the presence of folders (with data.val_fraction, also
  that each class folder has 2 images, reading no further); listing and
  decoding images is left to `create_dataset`. For `shapes` an absent cache
  is fine: it is generated on first use; for `tfds` an unprepared data set is
  fine if data.manual_dir holds what it is prepared from.
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
  if not 0.0 <= data_config.val_fraction < 1.0:
    raise DataError('data.val_fraction must be in [0, 1) (0: off), got '
                    f'{data_config.val_fraction}')
  if data_config.val_fraction and source != 'folder':
    raise DataError(f'data.val_fraction={data_config.val_fraction} splits an '
                    f"image folder (data.source='folder'); {source} data has "
                    'its own evaluation split: set it to 0')

  if source == 'synthetic':
    if data_config.num_synthetic_examples <= 0:
      raise DataError('data.num_synthetic_examples must be positive, got '
                      f'{data_config.num_synthetic_examples}')
    if data_config.num_synthetic_classes <= 0:
      raise DataError('data.num_synthetic_classes must be positive, got '
                      f'{data_config.num_synthetic_classes}')
  elif source == 'folder':
    _check_folder(data_config)
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
