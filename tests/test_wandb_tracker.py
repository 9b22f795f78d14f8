"""trainer/wandb_tracker.py, in W&B's offline mode (no network): a run's
records reach W&B's own run file, a restart resumes the same run, and a
project without the package is one line. The records of a real training
run: test_end_to_end.py::test_wandb_offline_holds_the_runs_metrics."""

import glob
import os
import struct
import sys
import time

import pytest

from configs import default
from core.errors import UsageError
from trainer import metrics_log
from trainer import wandb_tracker

_BLOCK = 32768  # the record log's block (LevelDB's log format, which W&B uses)
_HEADER = 7  # bytes: ':W&B', a magic number, a version


def wandb_records(path: str) -> list:
  """The records of a W&B run file (run-ID.wandb), parsed with W&B's own
  protocol buffers; the framing is LevelDB's log format: blocks of 32 KiB,
  each record a 7-byte header (CRC, length, type: full, first, middle,
  last) and its bytes, a block's tail under 7 bytes left zero."""
  from wandb.proto import wandb_internal_pb2  # pylint: disable=g-import-not-at-top
  with open(path, 'rb') as f:
    data = f.read()
  assert data[:4] == b':W&B'
  pos, pieces, records = _HEADER, b'', []
  while pos + 7 <= len(data):
    left = _BLOCK - pos % _BLOCK
    if left < 7:
      pos += left
      continue
    _, length, kind = struct.unpack('<IHB', data[pos:pos + 7])
    if kind == 0:  # the zeros after a block's last record
      pos += left
      continue
    pieces += data[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):  # full, last
      record = wandb_internal_pb2.Record()
      record.ParseFromString(pieces)
      records.append(record)
      pieces = b''
  return records


def wandb_history(workdir: str) -> tuple[list[str], list[dict]]:
  """(the run id of each of the work dir's W&B runs, oldest first; every
  history row of them, as {key: value})."""
  ids, rows = [], []
  for path in sorted(glob.glob(os.path.join(workdir, 'wandb', '*-run-*', 'run-*.wandb'))):
    for record in wandb_records(path):
      kind = record.WhichOneof('record_type')
      if kind == 'run':
        ids.append(record.run.run_id)
      elif kind == 'history':
        # A key with a '/' comes as its pieces.
        row = {item.key or '/'.join(item.nested_key): float(item.value_json)
               for item in record.history.item}
        rows.append({k: v for k, v in row.items() if not k.startswith('_')})
  return ids, rows


def _config(project='tests', mode='offline'):
  config = default.get_config()
  config.metrics.wandb_project, config.metrics.wandb_mode = project, mode
  return config


def test_a_restart_resumes_the_same_run_and_every_record_reads_back(tmp_path):
  workdir = str(tmp_path / 'my-run')
  os.makedirs(workdir)
  for steps in ([2, 4], [4, 6]):  # the restart trains step 4 again
    log = metrics_log.MetricsLog(workdir, tracker=wandb_tracker.start(_config(), workdir))
    for step in steps:
      log.write({'step': step, 'split': 'train', 'loss': 1 / step, 'note': 'not a number'})
    log.write({'step': steps[-1], 'split': 'eval', 'accuracy': 0.5})
    log.close()
    # W&B names a run's directory by the second it started: a restart, never
    # as quick as this, would otherwise share the first start's.
    time.sleep(1 - time.time() % 1 + 0.01)
  ids, rows = wandb_history(workdir)
  with open(os.path.join(workdir, wandb_tracker.ID_FILE_NAME)) as f:
    assert ids == [f.read().strip()] * 2
  assert rows == [{'train/loss': 0.5, 'trainer/step': 2}, {'train/loss': 0.25, 'trainer/step': 4},
                  {'eval/accuracy': 0.5, 'trainer/step': 4},
                  {'train/loss': 0.25, 'trainer/step': 4}, {'train/loss': 1 / 6, 'trainer/step': 6},
                  {'eval/accuracy': 0.5, 'trainer/step': 6}]


def test_no_project_no_tracker(tmp_path):
  assert wandb_tracker.start(_config(project=''), str(tmp_path)) is None
  assert not os.listdir(tmp_path)


def test_a_project_without_the_package_is_one_line_saying_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'wandb', None)  # import wandb raises ImportError
  with pytest.raises(UsageError, match=r"^metrics.wandb_project='tests' needs the wandb "
                     r'package, which is not installed: pip install wandb==0\.31\.0$'):
    wandb_tracker.check_config(_config())
  wandb_tracker.check_config(_config(project=''))  # without a project it is not needed


def test_an_unknown_mode_is_one_line():
  with pytest.raises(UsageError, match="metrics.wandb_mode='cloud' must be one of online, offline"):
    wandb_tracker.check_config(_config(mode='cloud'))


def test_online_without_a_login_is_one_line_naming_the_remedies(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))  # no ~/.netrc, no W&B settings
  for name in ('WANDB_API_KEY', 'WANDB_MODE', 'WANDB_DIR'):
    monkeypatch.delenv(name, raising=False)
  with pytest.raises(UsageError, match=r"^metrics.wandb_project='tests': W&B did not start "
                     r'\(.*\); run `wandb login`, or set metrics.wandb_mode=offline$'):
    wandb_tracker.start(_config(mode='online'), str(tmp_path))
