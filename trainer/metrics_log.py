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


class _EventFile:
  """TensorBoard scalars through tensorboardX's SummaryWriter: a public,
  maintained writer of TensorBoard's event files that needs neither
  TensorFlow (seconds to import, and a run on synthetic data needs it for
  nothing else) nor PyTorch. The pid in the file's name keeps restarts'
  files apart."""

  def __init__(self, directory: str):
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    self._writer = SummaryWriter(directory, filename_suffix=f'.{os.getpid()}')

  def scalars(self, step: int, values: dict[str, float]) -> None:
    for tag, value in values.items():
      self._writer.add_scalar(tag, value, step)
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


class MetricsLog:
  """Appends one JSON object per event; only process 0 writes (ARCHITECTURE.md)."""

  def __init__(self, workdir: str, *, enabled: bool = True, tracker=None):
    self._enabled = enabled
    self._path = os.path.join(workdir, METRICS_FILE_NAME)
    self._events = _EventFile(workdir) if enabled else None
    self._tracker = tracker  # trainer/wandb_tracker.py's, or None

  def write(self, record: dict) -> None:
    """`record` needs 'step' and 'split'; every number also goes to
    TensorBoard, and to the tracker when there is one."""
    if not self._enabled:
      return
    record = {k: _jsonable(v) for k, v in record.items()}
    with open(self._path, 'a') as f:
      f.write(json.dumps(record) + '\n')
    scalars = {f'{record["split"]}/{key}': value for key, value in record.items()
               if key not in ('step', 'split') and isinstance(value, (int, float))}
    self._events.scalars(record['step'], scalars)
    if self._tracker is not None:
      self._tracker.log(record['step'], scalars)

  def close(self) -> None:
    if self._events is not None:
      self._events.close()
    if self._tracker is not None:
      self._tracker.close()


def read(workdir: str) -> list[dict]:
  """All records of a work dir's metrics.jsonl (for tests and tools)."""
  path = os.path.join(workdir, METRICS_FILE_NAME)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
