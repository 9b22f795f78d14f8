"""An optional experiment tracker: Weights & Biases (metrics.wandb_project).

Process 0 sends every number that metrics.jsonl gets, as `SPLIT/FIELD`,
against `trainer/step` (not W&B's own step, which must only grow: a restart
trains the steps after its checkpoint again, and their points are kept).
The run is named after the work dir and keeps one id for the work dir's
life (WORKDIR/wandb_id.txt), so a restart resumes the same W&B run. Its
local files go to WORKDIR/wandb; in offline mode (metrics.wandb_mode) they
stay there until `wandb sync`.

The package is optional: a run that names a project without it installed
stops with exit 2 before anything is written.
"""

import os
import secrets

from core import atomic
from core.errors import UsageError

MODES = ('online', 'offline')
INSTALL = 'pip install wandb==0.31.0'
ID_FILE_NAME = 'wandb_id.txt'
STEP_KEY = 'trainer/step'


def check_config(config) -> None:
  """metrics.wandb_mode is one of MODES; a project needs the package."""
  metrics = config.metrics
  if metrics.wandb_mode not in MODES:
    raise UsageError(f'metrics.wandb_mode={metrics.wandb_mode!r} must be one of '
                     f'{", ".join(MODES)}')
  if not metrics.wandb_project:
    return
  try:
    import wandb  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise UsageError(f'metrics.wandb_project={metrics.wandb_project!r} needs the '
                     f'wandb package, which is not installed: {INSTALL}') from None


class Tracker:
  """One W&B run; `log` takes a record's numbers as MetricsLog names them
  ('train/loss': value)."""

  def __init__(self, run):
    self._run = run

  def log(self, step: int, scalars: dict[str, float]) -> None:
    self._run.log({**scalars, STEP_KEY: step})

  def close(self) -> None:
    self._run.finish()


def start(config, workdir: str) -> Tracker | None:
  """The tracker of a run (call on process 0 only); None when
  metrics.wandb_project is empty. A W&B that cannot start (online without
  a login, say) is UsageError naming the remedy."""
  metrics = config.metrics
  if not metrics.wandb_project:
    return None
  import wandb  # pylint: disable=g-import-not-at-top
  name = os.path.basename(os.path.abspath(workdir))
  try:
    run = wandb.init(project=metrics.wandb_project, entity=metrics.wandb_entity or None,
                     name=name, id=run_id(workdir), resume='allow',
                     mode=metrics.wandb_mode, dir=workdir, config=config.to_dict(),
                     # Its console capture would wrap this process's output.
                     settings=wandb.Settings(console='off', silent=True))
  except Exception as e:  # pylint: disable=broad-except
    first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise UsageError(f'metrics.wandb_project={metrics.wandb_project!r}: W&B did not '
                     f'start ({first_line}); run `wandb login`, or set '
                     'metrics.wandb_mode=offline') from None
  run.define_metric(STEP_KEY)
  run.define_metric('*', step_metric=STEP_KEY)
  return Tracker(run)


def run_id(workdir: str) -> str:
  """The work dir's W&B run id: made at its first run, kept after."""
  path = os.path.join(workdir, ID_FILE_NAME)
  if os.path.exists(path):
    with open(path) as f:
      return f.read().strip()
  made = secrets.token_hex(4)  # W&B ids are short lowercase letters and digits
  atomic.write_text(path, made + '\n')
  return made
