"""Reads a directory of class sub-folders of JPEG/PNG images.

Layout: `<dir>/<split>/<class>/*.{jpg,jpeg,png}` (extensions in any case,
nested folders inside a class allowed). The classes are the sorted sub-folder
names of the training split. This module only lists files and fixes the
class -> label map; decoding happens in `preprocess.py`.
"""

import dataclasses
import json
import os
import tempfile

import numpy as np

from input_pipeline.errors import DataError

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')


@dataclasses.dataclass(frozen=True)
class ImageFiles:
  """The images of one split: paths[i] has label labels[i]."""
  paths: list[str]
  labels: np.ndarray  # int32 [num_examples]

  def __len__(self) -> int:
    return len(self.paths)


def _visible_sorted(names):
  # Hidden entries (.DS_Store, .ipynb_checkpoints, our own temp dirs) are
  # never data.
  return sorted(n for n in names if not n.startswith('.'))


def list_classes(split_dir: str) -> list[str]:
  """Sorted names of the class sub-folders of `split_dir`."""
  if not os.path.isdir(split_dir):
    raise DataError(f'missing folder {split_dir}: expected one sub-folder '
                    'of images per class')
  return _visible_sorted(
      e.name for e in os.scandir(split_dir) if e.is_dir())


def _list_images(class_dir: str) -> list[str]:
  # Sorted walk: the file order, hence the label of every example index, must
  # be the same on every process and every run.
  found = []
  for root, dirs, files in os.walk(class_dir):
    dirs[:] = _visible_sorted(dirs)
    found.extend(
        os.path.join(root, f) for f in _visible_sorted(files)
        if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS)
  return sorted(found)


def list_images(split_dir: str, class_map: dict[str, int]) -> ImageFiles:
  """All images of a split, labelled by `class_map`.

  Raises:
    DataError: the split is missing, has a class the map does not know, or
      has no images at all.
  """
  classes = list_classes(split_dir)
  unknown = [c for c in classes if c not in class_map]
  if unknown:
    raise DataError(
        f'{split_dir} has classes that the training split does not: '
        f'{", ".join(unknown)}')
  paths, labels = [], []
  for name in classes:
    files = _list_images(os.path.join(split_dir, name))
    paths.extend(files)
    labels.extend([class_map[name]] * len(files))
  if not paths:
    raise DataError(f'no images in {split_dir}: expected '
                    f'{split_dir}/<class>/*.jpg or *.png')
  return ImageFiles(paths, np.asarray(labels, np.int32))


def read_class_map(path: str) -> dict[str, int]:
  try:
    with open(path) as f:
      class_map = json.load(f)
  except (OSError, ValueError) as e:
    raise DataError(f'cannot read the class map {path}: {e}') from e
  if (not isinstance(class_map, dict) or
      sorted(class_map.values()) != list(range(len(class_map)))):
    raise DataError(f'{path} is not a map of class name -> label 0..K-1')
  return class_map


def _write_atomically(path: str, text: str) -> None:
  # Write-then-rename, so that a crash or a concurrent reader (another
  # process of the same run) never sees half a file.
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix='.classes-', suffix='.tmp', dir=folder)
  try:
    with os.fdopen(fd, 'w') as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def class_map_for(train_dir: str, class_map_path: str | None) -> dict[str, int]:
  """The class -> label map: the saved one if any, else the sorted classes.

  A saved map wins so that labels stay stable over the life of a work dir
  (a checkpoint's classifier rows mean these classes); if the folder's classes
  differ from it, training would silently mislabel, so that is an error.

  Raises:
    DataError: no class folders, or classes that differ from the saved map.
  """
  classes = list_classes(train_dir)
  if not classes:
    raise DataError(f'no class folders in {train_dir}: expected '
                    f'{train_dir}/<class>/*.jpg or *.png')
  if class_map_path and os.path.exists(class_map_path):
    saved = read_class_map(class_map_path)
    if sorted(saved) != classes:
      raise DataError(
          f'the classes in {train_dir} ({", ".join(classes)}) differ from '
          f'those saved in {class_map_path} ({", ".join(sorted(saved))})')
    return saved
  class_map = {name: i for i, name in enumerate(classes)}
  if class_map_path:
    write_class_map(class_map_path, classes)
  return class_map


def write_class_map(path: str, class_names: list[str]) -> None:
  """Saves class name -> label (the position in `class_names`) atomically."""
  class_map = {name: i for i, name in enumerate(class_names)}
  _write_atomically(path, json.dumps(class_map, indent=2) + '\n')


def class_names(class_map: dict[str, int]) -> list[str]:
  """Class names in label order."""
  return sorted(class_map, key=class_map.__getitem__)


def read_folder(root: str, train_split: str, eval_split: str,
                class_map_path: str | None
               ) -> tuple[list[str], ImageFiles, ImageFiles]:
  """Class names, training images and evaluation images of `root`.

  Raises:
    DataError: see `class_map_for` and `list_images`; also a class without
      training images, which can only be a mistake.
  """
  train_dir = os.path.join(root, train_split)
  class_map = class_map_for(train_dir, class_map_path)
  train = list_images(train_dir, class_map)
  names = class_names(class_map)
  counts = np.bincount(train.labels, minlength=len(names))
  empty = [n for n, c in zip(names, counts) if c == 0]
  if empty:
    raise DataError(f'classes without images in {train_dir}: '
                    f'{", ".join(empty)}')
  evaluation = list_images(os.path.join(root, eval_split), class_map)
  return names, train, evaluation
