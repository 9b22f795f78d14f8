"""Host batches, exactly one per step, from examples that may fail to decode.

The common path: a data set's `Stream` (`stream.py`) goes through the
tf.data decode graph (`decode_graph.py`); in the usual case nothing failed,
a tf.data batch is exactly one step and passes through untouched. When a
step comes back short, `recovery.py` decodes its missing examples again one
by one and completes it; what stays unreadable is counted and named.

`load` maps one example's slice of the step inputs to {'image': uint8
[S, S, 3], 'label': int32}. Evaluation inputs carry 'mask' (False on
padding).
"""

from collections.abc import Callable, Iterator

from absl import logging
import numpy as np

from input_pipeline import decode_graph
from input_pipeline import recovery
from input_pipeline.dataset import Batch
from input_pipeline.stream import Stream

_LOGGED_SKIPS = 20  # warnings that name examples; later skips are only counted


def batches(stream: Stream, load: Callable, *, split: str, local_batch: int,
            image_size: int, prefetch: int, skipped: dict[str, int],
            unreadable: dict[str, set] | None = None) -> Iterator[Batch]:
  """Numpy batches, exactly one per step; unreadable examples are counted.

  Args:
    stream: the stream.
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
  dataset = decode_graph.build(stream, load, local_batch=local_batch, prefetch=prefetch)
  redo = recovery.redo_missing(stream, load, local_batch)
  nothing = {'slot': np.zeros(0, np.int32), 'mask': np.zeros(0, bool),
             'step': np.zeros(0, np.int64),
             'image': np.zeros((0, image_size, image_size, 3), np.uint8),
             'label': np.zeros(0, np.int32)}
  if split == 'train':
    del nothing['mask']

  def complete(step: int, rows: Batch) -> Batch:
    if len(rows['slot']) < local_batch:  # else nothing failed
      inputs = stream.inputs(step)
      rows = redo(step, inputs, rows)
      count_failures(inputs, rows['slot'])
    if split == 'train':
      return recovery.complete_train(rows, local_batch)
    return recovery.complete_eval(rows, local_batch)

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
  for tag, rows in recovery.steps_of(dataset, local_batch):
    for empty in range(step, tag):  # steps none of whose chunks decoded
      yield complete(empty, nothing)
    yield complete(tag, rows)
    step = tag + 1
  for empty in range(step, stream.count or 0):
    yield complete(empty, nothing)
