"""Which data evaluation reads: the training set's evaluation split, or the
one that eval.dataset, eval.split and eval.data_dir name.

Config arithmetic with no heavy import (no jax, no TensorFlow), so main.py can check the
evaluation data before the runtime starts.
"""

import ml_collections

from core.errors import UsageError
from input_pipeline import shapes


def eval_data_config(config) -> ml_collections.ConfigDict | None:
  """config.data for the evaluation data that eval.dataset, eval.split and
  eval.data_dir describe, reading only its evaluation split; None when
  evaluation reads the training data set's own evaluation split."""
  wanted = config.eval
  if not (wanted.dataset or wanted.split or wanted.data_dir):
    return None
  if config.data.source == 'synthetic':
    raise UsageError('eval.dataset, eval.split and eval.data_dir choose tfds, folder '
                     "or shapes data; data.source='synthetic' has one evaluation "
                     'split only')
  data = ml_collections.ConfigDict(config.data.to_dict())
  if data.source == 'shapes':
    # The generated set is a folder with train/ and val/: read it as one.
    if wanted.split and wanted.split not in shapes.SPLITS:
      raise UsageError(f'eval.split={wanted.split!r}: the shapes data has the '
                       f'splits {", ".join(shapes.SPLITS)}')
    data.source, data.dir = 'folder', data.dir or shapes.default_dir()
    data.eval_split = shapes.SPLITS[1]
  data.name = wanted.dataset or data.name
  data.dir = wanted.data_dir or data.dir
  data.eval_split = wanted.split or data.eval_split
  # Its training side is never read; naming the evaluation split there too
  # means no training split has to exist (imagenet_v2 has only `test`).
  data.train_split = data.eval_split
  data.val_fraction = 0.0  # the evaluation folder is read whole
  return data
