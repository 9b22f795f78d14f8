"""Host batches, one per step, from examples that may fail to decode.

A corrupt or truncated image must neither stop a run nor shift the stream.
tf.data can only drop an example whose decoding raised (`ignore_errors`); if
the pipeline simply batched what is left, every later batch would move by one
example, and a resumed run would no longer see the batches of an
uninterrupted one. So every example carries the step it belongs to, and the
host regroups the decoded examples by that tag: a step is complete when it has
all its examples or a later step's example has arrived. Training repeats the
step's readable examples in the free slots (the train step has no mask);
evaluation leaves them as masked zeros. In the usual case, nothing failed,
a tf.data batch is exactly one step and passes through untouched.

The caller hands in one element per step: a dict of [local_batch] tensors with
'mask' for evaluation (False on padding) and whatever its `load` function
needs. `load` maps one example's slice of that dict to {'image': uint8
[S, S, 3], 'label': int32}.
"""

from collections.abc import Callable, Iterator

from absl import logging
import numpy as np

from input_pipeline import order
from input_pipeline.dataset import Batch
from input_pipeline.errors import DataError
from input_pipeline.tf_setup import tf

AUTOTUNE = tf.data.AUTOTUNE
_LOGGED_SKIPS = 20  # warnings that name examples; later skips are only counted
# Tags that travel with each example to the host and never further.
_TAGS = ('step', 'slot', 'mask')


def build(steps: tf.data.Dataset, load: Callable, *, local_batch: int,
          prefetch: int) -> tf.data.Dataset:
  """Decoded examples, tagged with their step and slot, batched by count.

  Args:
    steps: one element per step, a dict of [local_batch] tensors.
    load: one example's dict -> {'image', 'label'}; it may raise.
    local_batch: examples per step on this process.
    prefetch: batches prepared ahead.
  """
  steps = steps.enumerate().map(
      lambda step, inputs: {
          **inputs, 'step': tf.fill([local_batch], step),
          'slot': tf.range(local_batch, dtype=tf.int32)})

  def load_tagged(example):
    tags = {key: example[key] for key in _TAGS if key in example}
    return {**load(example), **tags}

  examples = steps.unbatch().map(load_tagged, num_parallel_calls=AUTOTUNE,
                                 deterministic=True)
  # Only examples whose decoding raised are dropped; the others keep order.
  # (Their errors reach TF's log only below TF_CPP_MIN_LOG_LEVEL=2.)
  batches = examples.ignore_errors(log_warning=True).batch(local_batch)
  if prefetch > 0:
    batches = batches.prefetch(prefetch)
  options = tf.data.Options()
  options.deterministic = True
  return batches.with_options(options)


def _steps_of(batches: tf.data.Dataset, local_batch: int
              ) -> Iterator[tuple[int, Batch]]:
  """(step, its decoded examples) for each step with any, in step order."""
  pending = None
  for batch in batches.as_numpy_iterator():
    tags = batch['step']
    if pending is None and tags[0] == tags[-1] and len(tags) == local_batch:
      yield int(tags[0]), batch  # the usual case: one whole step
      continue
    pending = batch if pending is None else {
        k: np.concatenate([pending[k], batch[k]]) for k in batch}
    # Rows are in step order, so the first step's rows are a prefix. It is
    # complete if a later step's row follows it, or if it has them all.
    while pending is not None:
      first = pending['step'][0]
      count = int(np.count_nonzero(pending['step'] == first))
      if count == len(pending['step']) < local_batch:
        break  # more of this step may come in the next batch
      yield int(first), {k: v[:count] for k, v in pending.items()}
      pending = {k: v[count:] for k, v in pending.items()} if count < len(
          pending['step']) else None
  if pending is not None:  # the end of a finite stream
    yield int(pending['step'][0]), pending


def _complete_train(rows: Batch, local_batch: int) -> Batch:
  readable = len(rows['label'])
  if readable == local_batch:
    return {'image': rows['image'], 'label': rows['label']}
  if readable == 0:
    raise DataError('none of the examples of a training step could be '
                    'decoded: the data set is unreadable (see the warnings)')
  repeat = np.arange(local_batch) % readable
  return {'image': rows['image'][repeat], 'label': rows['label'][repeat]}


def _complete_eval(rows: Batch, local_batch: int) -> Batch:
  if len(rows['label']) == local_batch:
    return {'image': rows['image'], 'label': rows['label'],
            'mask': rows['mask']}
  slots = rows['slot']
  image = np.zeros((local_batch,) + rows['image'].shape[1:], np.uint8)
  label = np.zeros(local_batch, np.int32)
  mask = np.zeros(local_batch, bool)
  image[slots], label[slots], mask[slots] = (rows['image'], rows['label'],
                                             rows['mask'])
  return {'image': image, 'label': label, 'mask': mask}


def host_batches(batches: tf.data.Dataset, *, split: str, local_batch: int,
                 image_size: int, skipped: dict[str, int],
                 expected: Callable[[int], tuple[np.ndarray, np.ndarray]],
                 num_steps: int | None = None) -> Iterator[Batch]:
  """Numpy batches, exactly one per step; skipped examples are counted.

  Args:
    batches: the dataset `build` made.
    split: 'train' or 'eval': how a step with failed examples is completed,
      and which entry of `skipped` counts them.
    local_batch: examples per step on this process.
    image_size: side of the images.
    skipped: counts of skipped examples by split, updated in place.
    expected: i -> (example indices, mask) that the i-th step of the stream
      (counted from 0) asked for, the mask all True in training: what a
      failure is measured against. Called only for steps that lost examples,
      from the consumer's thread.
    num_steps: steps in the stream (evaluation); None: endless.
  """
  nothing = {'slot': np.zeros(0, np.int32), 'mask': np.zeros(0, bool),
             'image': np.zeros((0, image_size, image_size, 3), np.uint8),
             'label': np.zeros(0, np.int32)}

  def complete(step: int, rows: Batch) -> Batch:
    if len(rows['slot']) < local_batch:  # else nothing failed
      count_failures(step, rows['slot'])
    if split == 'train':
      return _complete_train(rows, local_batch)
    return _complete_eval(rows, local_batch)

  def count_failures(step: int, decoded_slots: np.ndarray) -> None:
    indices, mask = expected(step)
    failed = mask.copy()
    failed[decoded_slots] = False
    if failed.any():
      skipped[split] += int(failed.sum())
      logging.log_first_n(
          logging.WARNING, 'Skipped %d unreadable %s example(s), indices %s',
          _LOGGED_SKIPS, int(failed.sum()), split, indices[failed].tolist())

  step = 0
  for tag, rows in _steps_of(batches, local_batch):
    for empty in range(step, tag):  # steps none of whose examples decoded
      yield complete(empty, nothing)
    yield complete(tag, rows)
    step = tag + 1
  for empty in range(step, num_steps or 0):
    yield complete(empty, nothing)


def train_expected(dataset, start_step: int
                   ) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
  """`expected` for the training stream of `dataset` from `start_step`."""
  # Its own TrainOrder: the generator thread owns the stream's, whose
  # permutation cache is not safe to share.
  lookup = order.TrainOrder(dataset.num_train_examples, dataset.seed)

  def expected(i: int) -> tuple[np.ndarray, np.ndarray]:
    positions = order.train_positions(
        start_step + i, dataset.batch_size, dataset.process_index,
        dataset.process_count)
    return lookup.example_indices(positions), np.ones(len(positions), bool)
  return expected
