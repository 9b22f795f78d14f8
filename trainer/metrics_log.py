"""Where metrics go: metrics.jsonl and TensorBoard events in the work dir."""

import json
import math
import os
import socket
import time

METRICS_FILE_NAME = 'metrics.jsonl'


def _jsonable(value):
  value = float(value) if hasattr(value, '__float__') and not isinstance(value, int) else value
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # JSON has no NaN/inf; keep the record readable.
  return value


class _EventFile:
  """TensorBoard scalars in its event-file format, written with TensorBoard's
  own protos and record framing rather than tf.summary: TensorFlow takes
  seconds to import, and a run on synthetic data needs it for nothing else.
  The work dir is local (metrics.jsonl is written with open() too)."""

  def __init__(self, directory: str):
    # pylint: disable=g-import-not-at-top
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar import summary_v2
    from tensorboard.summary.writer import record_writer
    # pylint: enable=g-import-not-at-top
    self._event_pb2, self._scalar_pb = event_pb2, summary_v2.scalar_pb
    # The name TensorBoard looks for; the pid keeps restarts' files apart.
    name = (f'events.out.tfevents.{int(time.time())}.{socket.gethostname()}.'
            f'{os.getpid()}.0.v2')
    self._records = record_writer.RecordWriter(open(os.path.join(directory, name), 'ab'))
    self._write(event_pb2.Event(wall_time=time.time(), file_version='brain.Event:2'))

  def _write(self, event) -> None:
    self._records.write(event.SerializeToString())

  def scalars(self, step: int, values: dict[str, float]) -> None:
    for tag, value in values.items():
      self._write(self._event_pb2.Event(wall_time=time.time(), step=step,
                                        summary=self._scalar_pb(tag, value)))
    self._records.flush()

  def close(self) -> None:
    self._records.close()


class MetricsLog:
  """Appends one JSON object per event; only process 0 writes (ARCHITECTURE.md)."""

  def __init__(self, workdir: str, *, enabled: bool = True):
    self._enabled = enabled
    self._path = os.path.join(workdir, METRICS_FILE_NAME)
    self._events = _EventFile(workdir) if enabled else None

  def write(self, record: dict) -> None:
    """`record` needs 'step' and 'split'; every number also goes to TensorBoard."""
    if not self._enabled:
      return
    record = {k: _jsonable(v) for k, v in record.items()}
    with open(self._path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    self._events.scalars(record['step'], {
        f'{record["split"]}/{key}': value for key, value in record.items()
        if key not in ('step', 'split') and isinstance(value, (int, float))})

  def close(self) -> None:
    if self._events is not None:
      self._events.close()


def read(workdir: str) -> list[dict]:
  """All records of a work dir's metrics.jsonl (for tests and tools)."""
  path = os.path.join(workdir, METRICS_FILE_NAME)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
