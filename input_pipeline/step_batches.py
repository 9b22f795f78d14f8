"""Host batches, one per step, from examples that may fail to decode.

A data set describes its stream as `Steps`: the inputs of step i (record
bytes or file indices, crop seeds, ...), a pure function of i. tf.data
decodes the examples in chunks of up to `CHUNK` per function call: a call
and a thread hand-off per example cost about 6% of the ImageNet input
pipeline's throughput (benchmarks/input_pipeline.py).

A corrupt or truncated image must neither stop a run nor shift the stream.
tf.data can only drop an element whose decoding raised (`ignore_errors`), and
here that element is a whole chunk. So every example carries the step and
slot it belongs to, the host regroups the decoded examples by step, and a
step that came back short has its missing slots decoded again one by one
(`_redo_missing`): only the examples that fail on their own are skipped. A
step is complete when it has all its examples or a later step's example has
arrived. Training repeats the step's readable examples in the free slots (the
train step has no mask); evaluation leaves them as masked zeros. In the usual
case nothing failed, a tf.data batch is exactly one step and passes through
untouched.

`load` maps one example's slice of the step inputs to {'image': uint8
[S, S, 3], 'label': int32}. Evaluation inputs carry 'mask' (False on
padding).
"""

from collections.abc import Callable, Iterator
import dataclasses
import itertools
import math

from absl import logging
import numpy as np

from input_pipeline import example_seeds
from input_pipeline import order
from input_pipeline.dataset import Batch
from input_pipeline.errors import DataError
from input_pipeline.tf_setup import tf

AUTOTUNE = tf.data.AUTOTUNE
# Examples per call of the decode function: enough to make the per-call cost
# small against eight JPEG decodes, few enough that all cores get chunks.
CHUNK = 8
_LOGGED_SKIPS = 20  # warnings that name examples; later skips are only counted
# Tags that travel with each example to the host and never further.
_TAGS = ('step', 'slot', 'mask')


@dataclasses.dataclass(frozen=True)
class Steps:
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


def train_steps(dataset, start_step: int) -> Steps:
  """The training stream of `dataset` from `start_step`.

  Each step's stream positions, example indices, and each example's crop
  seed and flip: cheap numpy once per step, so that per-example work stays
  in tf.data's threads.
  """
  stream = order.TrainOrder(dataset.num_train_examples, dataset.seed)
  local = dataset.local_batch_size

  def inputs(i: int) -> dict[str, np.ndarray]:
    positions = order.train_positions(
        start_step + i, dataset.batch_size, dataset.process_index,
        dataset.process_count)
    crop_seeds, flips = example_seeds.crop_seeds_and_flips(dataset.seed,
                                                            positions)
    return {'position': positions, 'index': stream.example_indices(positions),
            'crop_seed': crop_seeds, 'flip': flips}
  return Steps(inputs, {'position': tf.TensorSpec([local], tf.int64),
                        'index': tf.TensorSpec([local], tf.int64),
                        'crop_seed': tf.TensorSpec([local, 2], tf.int64),
                        'flip': tf.TensorSpec([local], tf.bool)})


def eval_steps(dataset) -> Steps:
  """The evaluation stream of `dataset`: example indices and mask per step.

  Padding slots point at example 0 and are masked out (order.eval_indices).
  """
  indices, mask = order.eval_indices(
      dataset.num_eval_examples, dataset.eval_batch_size,
      dataset.process_index, dataset.process_count)
  local = dataset.local_eval_batch_size
  return Steps(lambda j: {'index': indices[j], 'mask': mask[j]},
               {'index': tf.TensorSpec([local], tf.int64),
                'mask': tf.TensorSpec([local], tf.bool)}, count=len(indices))


def _tagged(load: Callable) -> Callable:
  def load_tagged(example):
    tags = {key: example[key] for key in _TAGS if key in example}
    return {**load(example), **tags}
  return load_tagged


def build(steps: Steps, load: Callable, *, local_batch: int,
          prefetch: int) -> tf.data.Dataset:
  """Decoded examples, tagged with their step and slot, one batch per step.

  Args:
    steps: the stream.
    load: one example's dict -> {'image', 'label'}; it may raise.
    local_batch: examples per step on this process.
    prefetch: batches prepared ahead.
  """
  chunk = math.gcd(local_batch, CHUNK)
  chunks_per_step = local_batch // chunk

  def generate():
    # Cheap Python once per step; all per-example work is in tf.data's
    # threads.
    indices = itertools.count() if steps.count is None else range(steps.count)
    for i in indices:
      yield steps.inputs(i)

  def tag_and_split(step, inputs):
    inputs = {**inputs, 'step': tf.fill([local_batch], step),
              'slot': tf.range(local_batch, dtype=tf.int32)}
    return tf.data.Dataset.from_tensor_slices({
        key: tf.reshape(value, [chunks_per_step, chunk, *value.shape[1:]])
        for key, value in inputs.items()})

  load_tagged = _tagged(load)

  def load_chunk(inputs):
    examples = [load_tagged({key: value[j] for key, value in inputs.items()})
                for j in range(chunk)]
    return {key: tf.stack([e[key] for e in examples]) for key in examples[0]}

  def merge_chunks(batch):
    return {key: tf.reshape(value, [-1, *value.shape[2:]])
            for key, value in batch.items()}

  chunks = tf.data.Dataset.from_generator(
      generate, output_signature=steps.spec).enumerate().flat_map(
          tag_and_split)
  # A chunk whose decoding raised is dropped; the others keep their order.
  # (Errors reach TF's log only below TF_CPP_MIN_LOG_LEVEL=2.)
  decoded = chunks.map(load_chunk, num_parallel_calls=AUTOTUNE,
                       deterministic=True).ignore_errors(log_warning=True)
  batches = decoded.batch(chunks_per_step).map(merge_chunks)
  if prefetch > 0:
    batches = batches.prefetch(prefetch)
  options = tf.data.Options()
  options.deterministic = True
  # Without the autotuner, AUTOTUNE means one decode call in flight per core,
  # which is what it settles on here anyway. With it, tearing down a pipeline
  # (every evaluation pass) sometimes waits a second for its thread.
  options.autotune.enabled = False
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


def _redo_missing(steps: Steps, load: Callable, local_batch: int):
  """(i, its inputs, rows) -> rows plus the missing slots that decode alone.

  A chunk is dropped whole when one of its examples fails; its other
  examples are decoded here again, one at a time, by the same function on
  the same inputs (so with the same pixels). Failures are rare, so this runs
  in the consumer's thread.
  """
  example_spec = {key: tf.TensorSpec(spec.shape[1:], spec.dtype)
                  for key, spec in steps.spec.items()}
  example_spec['step'] = tf.TensorSpec([], tf.int64)
  example_spec['slot'] = tf.TensorSpec([], tf.int32)
  load_one = tf.function(_tagged(load), input_signature=[example_spec])

  def redo(i: int, inputs: dict[str, np.ndarray], rows: Batch) -> Batch:
    missing = np.setdiff1d(np.arange(local_batch), rows['slot'])
    redone = []
    for slot in missing:
      example = {key: value[slot] for key, value in inputs.items()}
      example.update(step=np.int64(i), slot=np.int32(slot))
      try:
        redone.append({k: v.numpy() for k, v in load_one(example).items()})
      except tf.errors.OpError:
        continue  # unreadable on its own: counted by the caller
    if not redone:
      return rows
    merged = {key: np.concatenate([rows[key],
                                   np.stack([r[key] for r in redone])])
              for key in rows}
    order_by_slot = np.argsort(merged['slot'], kind='stable')
    return {key: value[order_by_slot] for key, value in merged.items()}
  return redo


def batches(steps: Steps, load: Callable, *, split: str, local_batch: int,
            image_size: int, prefetch: int, skipped: dict[str, int],
            unreadable: dict[str, set] | None = None) -> Iterator[Batch]:
  """Numpy batches, exactly one per step; unreadable examples are counted.

  Args:
    steps: the stream.
    load: one example's dict -> {'image', 'label'}; it may raise.
    split: 'train' or 'eval': how a step with failed examples is completed,
      and which entry of `skipped` counts them.
    local_batch: examples per step on this process.
    image_size: side of the images.
    prefetch: batches prepared ahead.
    skipped: counts of skipped examples by split, updated in place.
    unreadable: the indices of the skipped examples by split, added in place
      (a set holds each once, however often it was read).
  """
  dataset = build(steps, load, local_batch=local_batch, prefetch=prefetch)
  redo = _redo_missing(steps, load, local_batch)
  nothing = {'slot': np.zeros(0, np.int32), 'mask': np.zeros(0, bool),
             'step': np.zeros(0, np.int64),
             'image': np.zeros((0, image_size, image_size, 3), np.uint8),
             'label': np.zeros(0, np.int32)}
  if split == 'train':
    del nothing['mask']

  def complete(step: int, rows: Batch) -> Batch:
    if len(rows['slot']) < local_batch:  # else nothing failed
      inputs = steps.inputs(step)
      rows = redo(step, inputs, rows)
      count_failures(inputs, rows['slot'])
    if split == 'train':
      return _complete_train(rows, local_batch)
    return _complete_eval(rows, local_batch)

  def count_failures(inputs: dict[str, np.ndarray],
                     decoded_slots: np.ndarray) -> None:
    indices = inputs['index']
    # Evaluation padding is not an example: its failure is not counted.
    failed = inputs['mask'].copy() if 'mask' in inputs else np.ones(
        local_batch, bool)
    failed[decoded_slots] = False
    if failed.any():
      skipped[split] += int(failed.sum())
      if unreadable is not None:
        unreadable[split].update(indices[failed].tolist())
      logging.log_first_n(
          logging.WARNING, 'Skipped %d unreadable %s example(s), indices %s',
          _LOGGED_SKIPS, int(failed.sum()), split, indices[failed].tolist())

  step = 0
  for tag, rows in _steps_of(dataset, local_batch):
    for empty in range(step, tag):  # steps none of whose chunks decoded
      yield complete(empty, nothing)
    yield complete(tag, rows)
    step = tag + 1
  for empty in range(step, steps.count or 0):
    yield complete(empty, nothing)
