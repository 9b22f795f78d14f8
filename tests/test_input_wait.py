"""trainer/input_wait.py: a stalled host stream is named within its limit, a
slow but live one is not, and a stop ends the wait."""

import threading
import time

import pytest

from core.errors import InputStalled
from trainer import input_wait


def _blocks_after(count: int, gaps_s=()):
  """Yields `count` batches (sleeping gaps_s[i] before batch i), then blocks."""
  for i in range(count):
    time.sleep(gaps_s[i] if i < len(gaps_s) else 0)
    yield {'batch': i}
  threading.Event().wait()


def test_a_stream_that_stops_producing_is_named_as_stalled_within_its_limit():
  stream = input_wait.WaitedStream(_blocks_after(1), 'training input (test)', 1.0)
  assert next(stream) == {'batch': 0}
  began = time.monotonic()
  with pytest.raises(InputStalled, match=r'the training input \(test\) produced no '
                     r'batch for 1 s .*data\.stall_timeout_s=1\)'):
    next(stream)
  assert 1.0 <= time.monotonic() - began < 3.0


def test_a_stop_during_the_wait_ends_it_at_once():
  stop = threading.Event()
  stream = input_wait.WaitedStream(_blocks_after(0), 'x', 0.0, stop.is_set)
  threading.Timer(0.2, stop.set).start()
  began = time.monotonic()
  with pytest.raises(input_wait.StopWhileWaiting):
    next(stream)
  assert time.monotonic() - began < 2.0


def test_a_pipeline_slower_than_the_timeout_but_live_is_not_stopped():
  # 0.1 s between the first batches: 20 such intervals (2 s) outlast the
  # 1 s timeout, so a 1.5 s gap is a slow pipeline, not a stalled one.
  stream = input_wait.WaitedStream(_blocks_after(3, (0, 0.1, 1.5)), 'x', 1.0)
  assert [next(stream)['batch'] for _ in range(3)] == [0, 1, 2]


def test_a_fast_pipeline_gets_the_timeout_as_its_limit():
  stream = input_wait.WaitedStream(_blocks_after(3, (0, 0.01, 1.5)), 'x', 1.0)
  assert [next(stream)['batch'] for _ in range(2)] == [0, 1]
  with pytest.raises(InputStalled):
    next(stream)


def test_the_stall_limit_is_the_timeout_or_twenty_recent_batch_intervals():
  assert input_wait.stall_limit_s(600, None) == 600
  assert input_wait.stall_limit_s(600, 1.0) == 600
  assert input_wait.stall_limit_s(600, 60.0) == 1200


def test_the_streams_end_and_its_errors_reach_the_loop():
  assert list(input_wait.WaitedStream(iter([1, 2]), 'x', 1.0)) == [1, 2]

  def failing():
    yield 1
    raise ValueError('unreadable shard')
  stream = input_wait.WaitedStream(failing(), 'x', 1.0)
  assert next(stream) == 1
  with pytest.raises(ValueError, match='unreadable shard'):
    next(stream)


def test_a_zero_timeout_waits_on():
  stream = input_wait.WaitedStream(_blocks_after(3, (0, 0, 1.2)), 'x', 0.0)
  assert [next(stream)['batch'] for _ in range(3)] == [0, 1, 2]


def test_closing_the_stream_closes_its_source_in_the_reading_thread():
  closed = threading.Event()

  def source():
    try:
      while True:
        yield {'label': [0]}
    finally:
      closed.set()  # where tf.data's iterator would stop its threads
  stream = input_wait.WaitedStream(source(), 'x', 1.0, ahead=1)
  next(stream)
  stream.close()
  assert closed.is_set()


def test_timing_a_stalled_pipeline_ends_with_its_line_not_a_hang():
  from trainer import host_input  # pylint: disable=g-import-not-at-top
  began = time.monotonic()
  with pytest.raises(InputStalled, match=r'the probe input produced no batch for 1 s'):
    host_input.time_input(({'label': [0]} for _ in _blocks_after(2)), 1, 5,
                          pipeline='probe input', stall_timeout_s=1.0)
  assert time.monotonic() - began < 5.0
