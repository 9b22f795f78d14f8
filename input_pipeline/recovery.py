"""Recovery from examples that fail to decode, without shifting the stream.

A corrupt or truncated image must neither stop a run nor shift the stream.
tf.data can only drop an element whose decoding raised (`ignore_errors`), and
here that element is a whole chunk (`decode_graph.py`). So the host regroups
the decoded examples by step (`steps_of`), and a step that came back short
has its missing slots decoded again one by one (`redo_missing`): only the
examples that fail on their own are skipped. A step is complete when it has
all its examples or a later step's example has arrived. Training repeats the
step's readable examples in the free slots (the train step has no mask);
evaluation leaves them as masked zeros (`complete_train`, `complete_eval`).
"""

from collections.abc import Callable, Iterator

import numpy as np

from input_pipeline import decode_graph
from input_pipeline.dataset import Batch
from input_pipeline.errors import DataError
from input_pipeline.stream import Stream
from input_pipeline.tf_setup import tf


def steps_of(batches: tf.data.Dataset, local_batch: int
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


def complete_train(rows: Batch, local_batch: int) -> Batch:
  readable = len(rows['label'])
  if readable == local_batch:
    return {'image': rows['image'], 'label': rows['label']}
  if readable == 0:
    raise DataError('none of the examples of a training step could be '
                    'decoded: the data set is unreadable (see the warnings)')
  repeat = np.arange(local_batch) % readable
  return {'image': rows['image'][repeat], 'label': rows['label'][repeat]}


def complete_eval(rows: Batch, local_batch: int) -> Batch:
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


def redo_missing(stream: Stream, load: Callable, local_batch: int):
  """(i, its inputs, rows) -> rows plus the missing slots that decode alone.

  A chunk is dropped whole when one of its examples fails; its other
  examples are decoded here again, one at a time, by the same function on
  the same inputs (so with the same pixels). Failures are rare, so this runs
  in the consumer's thread.
  """
  example_spec = {key: tf.TensorSpec(spec.shape[1:], spec.dtype)
                  for key, spec in stream.spec.items()}
  example_spec['step'] = tf.TensorSpec([], tf.int64)
  example_spec['slot'] = tf.TensorSpec([], tf.int32)
  load_one = tf.function(decode_graph.tagged(load), input_signature=[example_spec])

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
