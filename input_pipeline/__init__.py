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
"""

from input_pipeline.create import create_dataset
from input_pipeline.dataset import Batch, Dataset
from input_pipeline.errors import DataError
from input_pipeline.validate import check_data_config

__all__ = ['Batch', 'DataError', 'Dataset', 'check_data_config',
           'create_dataset']
