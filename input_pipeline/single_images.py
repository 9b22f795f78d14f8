"""Images named by the user, in the evaluation view of a run's data source
(--mode=predict): listing, decoding one by one, naming what cannot be read."""

import os
from typing import Iterator

import numpy as np

from input_pipeline import folder
from input_pipeline.errors import DataError


def list_inputs(spec: str) -> list[str]:
  """The image files that predict.inputs names, in order: comma-separated
  image files, folders (searched below for .jpg, .jpeg and .png files, in
  sorted order) and .txt files (one path per line; blank lines and lines
  starting with # are skipped; relative paths are from the list's folder)."""
  paths = []
  for item in (s.strip() for s in spec.split(',')):
    if not item:
      continue
    item = os.path.expanduser(item)
    if os.path.isdir(item):
      paths += list(folder.walk_images(item))
    elif item.lower().endswith('.txt') and os.path.isfile(item):
      base = os.path.dirname(os.path.abspath(item))
      with open(item, encoding='utf-8') as f:
        lines = [l.strip() for l in f]
      paths += [os.path.join(base, l) for l in lines if l and not l.startswith('#')]
    elif os.path.isfile(item):
      paths.append(item)
    else:
      raise DataError(f'predict.inputs: {item} is not an image file, a folder or a '
                      '.txt list of images')
  if not paths:
    raise DataError(f'predict.inputs={spec!r} names no image (.jpg, .jpeg or .png)')
  return paths


def eval_view(data):
  """The function from an image file's path to the uint8 [S, S, 3] image
  that evaluation of data.source gives it: tfds data's centred crop
  (data.eval_crop_fraction), otherwise the whole image resized."""
  from input_pipeline import create, crops, preprocess  # pylint: disable=g-import-not-at-top
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  size = data.image_size
  if data.source == 'tfds':
    decoding = create.jpeg_decoding(data)
    return lambda path: crops.center_crop(tf.io.read_file(path), size,
                                          data.eval_crop_fraction, decoding=decoding)
  return lambda path: preprocess.resize(preprocess.decode(path), size)


def batches(paths: list[str], data, batch_size: int
            ) -> Iterator[tuple[list[str], list[np.ndarray], list[str]]]:
  """(names, their uint8 [S, S, 3] images, unreadable names) per
  `batch_size` readable images; an image that fails to decode is named and
  skipped."""
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  view = tf.function(eval_view(data))
  names, images, unreadable = [], [], []
  for path in paths:
    try:
      images.append(view(tf.constant(path)).numpy())
      names.append(path)
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError,
            tf.errors.UnknownError):
      unreadable.append(path)
    if len(names) == batch_size:
      yield names, images, unreadable
      names, images, unreadable = [], [], []
  if names or unreadable:
    yield names, images, unreadable
