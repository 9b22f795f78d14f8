"""--mode=prepare: make the configured data ready once, before a multi-host job.

A tfds data set is prepared from data.manual_dir into data.dir (hours for
ImageNet) and the shapes data set is generated; the processes of a job then
only read. A folder of images needs nothing but is listed, so that a wrong
layout shows now; synthetic data is made in memory.
"""

import os

from core.errors import UsageError
from input_pipeline import folder
from input_pipeline import shapes
from input_pipeline import tfds_check
from input_pipeline.validate import check_data_config


def prepare_data(data_config, *, seed: int, multi_process: bool,
                 eval_only: bool = False) -> str:
  """Prepares the data of `config.data`; returns one line: what is ready, where.

  eval_only: `data_config` names evaluation data only (eval.dataset,
  eval.data_dir); its training split is not read.

  Raises:
    UsageError: more than one process (each would prepare into the same
      folder).
    DataError: the data cannot be prepared (see `check_data_config`).
  """
  if multi_process:
    raise UsageError('--mode=prepare runs as one process: start it without '
                     '--num_processes, srun or mpirun, then start the job')
  check_data_config(data_config)
  source = data_config.source
  if source == 'synthetic':
    return 'synthetic data is made in memory: nothing to prepare'
  if source == 'tfds':
    return _prepare_tfds(data_config)
  if source == 'shapes':
    root = os.path.abspath(os.path.expanduser(
        data_config.dir or shapes.default_dir()))
    done = 'already generated' if shapes.is_complete(root) else 'generated'
    root = shapes.ensure(root)
    names, train, evaluation = folder.read_folder(root, *shapes.SPLITS, None)
    return (f'shapes data set {done} in {root}: {len(names)} classes, '
            f'{len(train)} training and {len(evaluation)} evaluation images')
  root = os.path.expanduser(data_config.dir)
  if eval_only:
    split_dir = os.path.join(root, data_config.eval_split)
    names = folder.list_classes(split_dir)
    images = folder.list_images(split_dir, {n: i for i, n in enumerate(names)})
    return (f'evaluation image folder {split_dir} is read as it is, nothing '
            f'to prepare: {len(names)} classes, {len(images)} images')
  if data_config.val_fraction:
    names, train, evaluation = folder.split_folder(
        root, data_config.val_fraction, seed, None)
    how = (f'data.val_fraction={data_config.val_fraction} of each class held '
           f'out with seed {seed}')
  else:
    names, train, evaluation = folder.read_folder(
        root, data_config.train_split, data_config.eval_split, None)
    how = f'{data_config.train_split}/ and {data_config.eval_split}/'
  return (f'image folder {root} is read as it is, nothing to prepare: '
          f'{len(names)} classes, {len(train)} training and {len(evaluation)} '
          f'evaluation images ({how})')


def _prepare_tfds(data_config) -> str:
  name, root = data_config.name, tfds_check.data_dir(data_config)
  already = tfds_check.is_prepared(root, name)
  # Imported here: TensorFlow and tfds take seconds to import.
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import tfds_source
  # Prepares it, as a single-process training run would, if it is not there.
  source = tfds_source.open_source(data_config, process_count=1)
  splits = ', '.join(f'{split} {info.num_examples}' for split, info in
                     source.builder.info.splits.items())
  return (f'tfds data set {name} {"already" if already else "now"} prepared '
          f'in {root}: {len(source.class_names)} classes'
          + (f'; splits: {splits}' if splits else ''))
