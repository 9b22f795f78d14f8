"""Where metrics go: metrics.jsonl and TensorBoard events in the work dir."""

import json
import math
import os

METRICS_FILE_NAME = 'metrics.jsonl'


def _jsonable(value):
  value = float(value) if hasattr(value, '__float__') and not isinstance(value, int) else value
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # JSON has no NaN/inf; keep the record readable.
  return value


class MetricsLog:
  """Appends one JSON object per event; only process 0 writes (ARCHITECTURE.md)."""

  def __init__(self, workdir: str, *, enabled: bool = True):
    self._enabled = enabled
    self._path = os.path.join(workdir, METRICS_FILE_NAME)
    self._summary = None
    if enabled:
      # Quiet and off the accelerators, as for the input pipeline.
      from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
      self._tf = tf
      self._summary = tf.summary.create_file_writer(workdir)

  def write(self, record: dict) -> None:
    """`record` needs 'step' and 'split'; every number also goes to TensorBoard."""
    if not self._enabled:
      return
    record = {k: _jsonable(v) for k, v in record.items()}
    with open(self._path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    with self._summary.as_default(step=record['step']):
      for key, value in record.items():
        if key not in ('step', 'split') and isinstance(value, (int, float)):
          self._tf.summary.scalar(f'{record["split"]}/{key}', value)
    self._summary.flush()

  def close(self) -> None:
    if self._summary is not None:
      self._summary.close()


def read(workdir: str) -> list[dict]:
  """All records of a work dir's metrics.jsonl (for tests and tools)."""
  path = os.path.join(workdir, METRICS_FILE_NAME)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
