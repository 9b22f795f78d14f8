"""Waiting for the host pipeline's next batch, without ever waiting blind.

A tf.data iterator (or any generator) that stops producing holds the thread
that asked in a native call for ever: no line says so, and a stop signal's
handler never runs. So the batches are pulled in a background thread into a
small queue, and the loop waits for the next one in slices of _SLICE_S: after
each slice it asks whether a stop was requested (`StopWhileWaiting`), and
when no batch has come for the stall limit it ends the run with
`InputStalled` (exit EXIT_INPUT_STALLED), saving nothing new.

The limit is data.stall_timeout_s, or, once batches flow, _BATCH_TIMES times
the recent time between batches when that is longer: a slow but live
pipeline is never taken for a stalled one.
"""

import math
import queue
import threading
import time
from typing import Callable, Iterator

from configs.values import at_least
from core.errors import InputStalled, UsageError
from trainer import eval_data

_SLICE_S = 0.5  # how often the wait looks at the stop request and the clock
# A live pipeline's batch interval varies (a shuffle buffer refilling, a file
# opened at a shard's start); a stall is this many intervals without a batch.
_BATCH_TIMES = 20
_RECENT = 0.9  # the weight of the past in the moving average of the interval


class StopWhileWaiting(Exception):
  """A stop signal came while the loop waited for a batch."""


def check_config(config) -> None:
  """data.stall_timeout_s: finite seconds >= 0 (0: wait for ever)."""
  timeout_s = config.data.stall_timeout_s
  if not math.isfinite(timeout_s):
    raise UsageError(f'data.stall_timeout_s={timeout_s!r} must be a finite number '
                     'of seconds (0: wait for ever)')
  at_least('data.stall_timeout_s', timeout_s, 0)


def stall_limit_s(timeout_s: float, batch_interval_s: float | None) -> float:
  """How long the loop waits for a batch before it calls the pipeline stalled:
  `timeout_s`, or _BATCH_TIMES recent intervals when batches flow slower."""
  if batch_interval_s is None:
    return timeout_s
  return max(timeout_s, _BATCH_TIMES * batch_interval_s)


class WaitedStream:
  """An iterator over `batches` that a stalled pipeline cannot hold for ever.

  `pipeline` names it in the stall's line (which data, which split);
  `stop_requested`, asked after each slice of the wait, turns a stop signal
  into StopWhileWaiting; `timeout_s` 0 waits for ever (a stop still ends the
  wait). The background thread reads at most `ahead` batches ahead.
  """

  def __init__(self, batches: Iterator, pipeline: str, timeout_s: float,
               stop_requested: Callable[[], bool] | None = None, ahead: int = 2):
    self._pipeline = pipeline
    self._timeout_s = timeout_s
    self._stop_requested = stop_requested or (lambda: False)
    self._queue = queue.Queue(maxsize=max(ahead, 1))
    self._interval_s = None  # moving average of the time between batches
    self._done = False
    self._closed = threading.Event()
    self._thread = threading.Thread(target=self._pull, args=(batches,), daemon=True,
                                    name=f'input: {pipeline}')
    self._thread.start()

  def _pull(self, batches: Iterator) -> None:
    last = None
    try:
      for batch in batches:
        now = time.monotonic()
        if last is not None:
          gap = now - last
          self._interval_s = gap if self._interval_s is None else (
              _RECENT * self._interval_s + (1 - _RECENT) * gap)
        last = now
        if not self._put(('batch', batch)):
          break
      else:
        self._put(('end', None))
    except BaseException as e:  # pylint: disable=broad-except
      self._put(('error', e))  # raised in the loop's thread
    finally:
      # A generator can be closed only by the thread that runs it: closing
      # it here stops tf.data's own threads with it.
      if self._closed.is_set() and hasattr(batches, 'close'):
        batches.close()

  def _put(self, item) -> bool:
    """Queues `item` for the loop; False once the stream is closed."""
    while not self._closed.is_set():
      try:
        self._queue.put(item, timeout=_SLICE_S)
        return True
      except queue.Full:
        pass
    return False

  def close(self, wait_s: float = 10.0) -> None:
    """Stops reading: the thread closes the source once its batch in hand
    is read. Waits for that at most `wait_s` (a stalled source may never
    return; its thread is a daemon)."""
    self._closed.set()
    self._thread.join(wait_s)

  def ready(self) -> bool:
    """True when the next batch (or the stream's end) is there already."""
    return not self._queue.empty()

  def __iter__(self):
    return self

  def __next__(self):
    if self._done:
      raise StopIteration
    started = time.monotonic()
    while True:
      try:
        kind, item = self._queue.get(timeout=_SLICE_S)
        break
      except queue.Empty:
        waited = time.monotonic() - started
      if self._stop_requested():
        raise StopWhileWaiting(self._pipeline)
      limit = stall_limit_s(self._timeout_s, self._interval_s)
      if self._timeout_s > 0 and waited >= limit:
        raise InputStalled(
            f'the {self._pipeline} produced no batch for {waited:.0f} s (limit '
            f'{limit:.0f} s, data.stall_timeout_s={self._timeout_s:g}); stopped '
            'without saving (the last checkpoint stands): check the data '
            'source, or raise data.stall_timeout_s for a slower one')
    if kind == 'batch':
      return item
    self._done = True
    if kind == 'error':
      raise item
    raise StopIteration


def pipeline_name(config, evaluation: bool = False) -> str:
  """'training input (data.source=tfds imagenet2012, split train)': the
  pipeline a stall's line names. The evaluation's data is eval.*'s when set."""
  data = config.data
  if evaluation:
    data = eval_data.eval_data_config(config) or data
  what = ' '.join(v for v in (data.source, data.name) if v)
  split = data.eval_split if evaluation else data.train_split
  return (f'{"evaluation" if evaluation else "training"} input '
          f'(data.source={what}, split {split})')
