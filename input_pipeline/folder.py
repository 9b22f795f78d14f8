"""Reads a directory of class sub-folders of JPEG/PNG images.

Layout: `<dir>/<split>/<class>/*.{jpg,jpeg,png}` (extensions in any case,
nested folders inside a class allowed). The classes are the sorted sub-folder
names of the training split. With data.val_fraction the layout is
`<dir>/<class>/*` instead, and part of each class is held out for evaluation
(`split_folder`). This module only lists files and fixes the class -> label
map; decoding happens in `preprocess.py`.
"""

import dataclasses
import itertools
import json
import os
import zlib

import numpy as np

from core import atomic
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


def walk_images(class_dir: str):
  """The images under `class_dir`, lazily, in a fixed order."""
  for root, dirs, files in os.walk(class_dir):
    dirs[:] = _visible_sorted(dirs)
    yield from (os.path.join(root, f) for f in _visible_sorted(files)
                if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS)


def _list_images(class_dir: str) -> list[str]:
  # Sorted: the file order, hence the label of every example index, must be
  # the same on every process and every run.
  return sorted(walk_images(class_dir))


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
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  # Whole or absent: a crash or a concurrent reader (another process of the
  # same run) never sees half a file.
  atomic.write_text(path, json.dumps(class_map, indent=2) + '\n')


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


# --- data.val_fraction: one folder of classes, split here --------------------

# Keeps the split's random stream apart from the others derived from the seed.
_SPLIT_STREAM = 0x5b11


def held_out_indices(num_files: int, val_fraction: float, seed: int,
                     class_name: str) -> np.ndarray:
  """Which of a class's sorted files are held out for evaluation (sorted).

  round(val_fraction * num_files) of them, but at least one and at most
  num_files - 1, so that the class is in both splits. The choice is a
  permutation from (seed, class name): the same on every process, and a
  class keeps its split when other classes are added or removed.
  """
  count = min(num_files - 1, max(1, round(val_fraction * num_files)))
  rng = np.random.default_rng(
      [_SPLIT_STREAM, seed, zlib.crc32(class_name.encode())])
  return np.sort(rng.permutation(num_files)[:count])


def classes_too_small_to_split(root: str) -> list[str]:
  """The class folders under `root` with fewer than 2 images.

  Stops reading a class at its second image, so that it is cheap enough to
  run before any work even on a large folder.
  """
  return [name for name in list_classes(root)
          if len(list(itertools.islice(
              walk_images(os.path.join(root, name)), 2))) < 2]


def split_folder(root: str, val_fraction: float, seed: int,
                 class_map_path: str | None
                ) -> tuple[list[str], ImageFiles, ImageFiles]:
  """Class names, training and held-out evaluation images of `root`/<class>/.

  Raises:
    DataError: no class folders, a class with fewer than 2 images (it cannot
      be in both splits), or classes that differ from the saved map.
  """
  classes = list_classes(root)
  files = {name: _list_images(os.path.join(root, name)) for name in classes}
  too_few = [name for name in classes if len(files[name]) < 2]
  if too_few:
    raise DataError(too_few_message(root, val_fraction, too_few))
  class_map = class_map_for(root, class_map_path)
  split = {'train': ([], []), 'eval': ([], [])}
  for name in classes:
    held = set(held_out_indices(len(files[name]), val_fraction, seed,
                                name).tolist())
    for i, path in enumerate(files[name]):
      paths, labels = split['eval' if i in held else 'train']
      paths.append(path)
      labels.append(class_map[name])
  train, evaluation = (ImageFiles(paths, np.asarray(labels, np.int32))
                       for paths, labels in split.values())
  return class_names(class_map), train, evaluation


def too_few_message(root: str, val_fraction: float, classes: list[str]) -> str:
  return (f'data.val_fraction={val_fraction} needs at least 2 images in every '
          f'class folder of {root} (one to train on, one to hold out); too '
          f'few in: {", ".join(classes)}')
