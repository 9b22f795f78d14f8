"""Host input for training and evaluation: numpy batches, one share per process.

Sources (`config.data.source`): `tfds` (a prepared tensorflow-datasets image
classification set such as imagenet2012, or one prepared from data.manual_dir),
`shapes` (a generated, learnable data set), `folder` (class sub-folders of
JPEG/PNG images) and `synthetic` (random tensors for benchmarks). Training
order and augmentation are pure functions of (seed, step), so a resumed run
sees exactly the stream of an uninterrupted one; each process reads only its
own share; evaluation sees every example once (padded and masked, never
dropped). An image that cannot be decoded is skipped and counted
(`Dataset.skipped_counts()`), never fatal.

Importing this package is cheap: TensorFlow and tfds are imported only when
a dataset that decodes files is created.

The map, by job:

  entry        create.py (config.data -> a Dataset), validate.py (cheap checks
               before heavy imports), errors.py (DataError), dataset.py (the
               interface the trainer uses), paired.py (training batches of
               one data set, evaluation batches of another), prepare.py
               (--mode=prepare), single_images.py (files the user names,
               in the evaluation view: --mode=predict)
  sources      folder.py (class sub-folders), shapes.py (the generated data
               set, a folder), tfds_check.py + tfds_source.py (a prepared tfds
               set and random access to its records), tfrecord_index.py (the
               offsets index behind that access), synthetic.py (no files)
  which        order.py (which examples a process reads at a step),
  examples     repeated.py (each image K times: repeated augmentation),
               example_seeds.py (each example's randomness)
  decoding     preprocess.py and crops.py (TensorFlow ops per example),
               tf_setup.py (TensorFlow imported quietly, off accelerators)
  augmenting   augmentation.py (the data.* keys, no TensorFlow),
               augment_checks.py (their values, and CutMix's, checked),
               host_augment.py (their draws in the stream, their ops in
               tf.data): randaugment.py with image_ops.py, random_erasing.py
  one batch    stream.py (a split as a stream of steps' inputs) ->
  per step     decode_graph.py (the tf.data graph) -> step_batches.py (host
               batches, one per step) with recovery.py (examples that fail
               to decode), used by files_dataset.py (folder, shapes) and
               tfds_dataset.py
"""

from input_pipeline.create import create_dataset
from input_pipeline.dataset import Batch, Dataset
from input_pipeline.errors import DataError
from input_pipeline.paired import PairedDataset
from input_pipeline.validate import check_data_config

__all__ = ['Batch', 'DataError', 'Dataset', 'PairedDataset', 'check_data_config',
           'create_dataset']
