"""What a data set's stream of steps is: the inputs of step i, a pure function of i.

A data set describes its training or evaluation stream as a `Stream`: for
each step, the inputs its examples are loaded from (record bytes or file
indices, crop seeds, flips, ...). tf.data decodes them (`decode_graph.py`)
and `step_batches.py` turns the decoded examples into one host batch per
step.
"""

from collections.abc import Callable
import dataclasses

import numpy as np

from input_pipeline import example_seeds
from input_pipeline import host_augment
from input_pipeline import order
from input_pipeline import repeated
from input_pipeline.tf_setup import tf


@dataclasses.dataclass(frozen=True)
class Stream:
  """A stream of steps, as a data set describes it.

  Attributes:
    inputs: i -> the inputs of the i-th step of the stream (counted from 0),
      a dict of numpy arrays whose first dimension is the local batch, with
      at least 'index' (the example indices, which name skipped examples)
      and, in evaluation, 'mask'. A pure function of i: it is called again,
      from another thread, for a step that lost examples.
    spec: the tf.TensorSpec of each input.
    count: steps in the stream; None: endless.
  """
  inputs: Callable[[int], dict[str, np.ndarray]]
  spec: dict[str, tf.TensorSpec]
  count: int | None = None


def train_stream(dataset, start_step: int, image_size: int) -> Stream:
  """The training stream of `dataset` from `start_step`.

  Each step's stream positions, example indices, and each example's crop
  seed and flip, and the draws of `dataset.augmentation` (host_augment.py,
  for images of `image_size`): cheap numpy once per step, so that
  per-example work stays in tf.data's threads.
  """
  augmentation = dataset.augmentation
  stream = repeated.train_order(dataset.num_train_examples, dataset.seed,
                                augmentation.repeats, dataset.batch_size)
  local = dataset.local_batch_size

  def inputs(i: int) -> dict[str, np.ndarray]:
    positions = order.train_positions(
        start_step + i, dataset.batch_size, dataset.process_index,
        dataset.process_count)
    crop_seeds, flips = example_seeds.crop_seeds_and_flips(dataset.seed,
                                                            positions)
    return {'position': positions, 'index': stream.example_indices(positions),
            'crop_seed': crop_seeds, 'flip': flips,
            **host_augment.inputs(augmentation, dataset.seed, positions,
                                  image_size)}
  return Stream(inputs, {'position': tf.TensorSpec([local], tf.int64),
                        'index': tf.TensorSpec([local], tf.int64),
                        'crop_seed': tf.TensorSpec([local, 2], tf.int64),
                        'flip': tf.TensorSpec([local], tf.bool),
                        **host_augment.spec(augmentation, local)})


def eval_stream(dataset) -> Stream:
  """The evaluation stream of `dataset`: example indices and mask per step.

  Padding slots point at example 0 and are masked out (order.eval_indices).
  """
  indices, mask = order.eval_indices(
      dataset.num_eval_examples, dataset.eval_batch_size,
      dataset.process_index, dataset.process_count)
  local = dataset.local_eval_batch_size
  return Stream(lambda j: {'index': indices[j], 'mask': mask[j]},
               {'index': tf.TensorSpec([local], tf.int64),
                'mask': tf.TensorSpec([local], tf.bool)}, count=len(indices))
