"""--mode=report: pictures of a run, drawn from its work dir's files.

Reads metrics.jsonl and goodput.json (trainer/goodput.py), so a finished,
stopped or running run can be drawn at any time; writes one PNG per
question into the work dir and nothing else:

  report_loss.png      train loss (each record, and its moving average) and
                       eval loss (raw weights, and the EMA weights' if any)
  report_accuracy.png  the same for top-1 accuracy
  report_lr.png        the learning rate
  report_speed.png     images/s and MFU
  report_goodput.png   each attempt's wall time by part, stacked
"""

import os

from core.errors import UsageError
from trainer import goodput
from trainer import metrics_log

_SMOOTHING = 0.9  # the moving average's weight of the past (TensorBoard's 0.6 is for noisier curves)


def moving_average(values: list[float], weight: float = _SMOOTHING) -> list[float]:
  """Each value's exponential moving average of the values so far, debiased
  at the start (TensorBoard's smoothing)."""
  out, last, norm = [], 0.0, 0.0
  for v in values:
    last = weight * last + (1 - weight) * v
    norm = weight * norm + (1 - weight)
    out.append(last / norm)
  return out


def _series(records: list[dict], split: str, key: str) -> tuple[list[int], list[float]]:
  points = [(r['step'], r[key]) for r in records
            if r.get('split') == split and isinstance(r.get(key), (int, float))]
  return [s for s, _ in points], [v for _, v in points]


def run_report(workdir: str) -> dict:
  """Draws the run in `workdir`; returns {'plots': [paths]}."""
  records = metrics_log.read(workdir)
  if not any(r.get('split') == 'train' for r in records):
    raise UsageError(f'--workdir={workdir}: metrics.jsonl has no training record yet; '
                     'a report draws a run that has logged at least one step')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  plots = [
      _curves(plt, workdir, records, 'loss', 'loss', 'Loss (cross-entropy)'),
      _curves(plt, workdir, records, 'accuracy', 'accuracy', 'Top-1 accuracy'),
      _learning_rate(plt, workdir, records),
      _speed(plt, workdir, records),
  ]
  attempts = goodput.read(workdir)
  if attempts:
    plots.append(_goodput(plt, workdir, attempts))
  return {'plots': plots}


def _save(plt, fig, workdir: str, name: str) -> str:
  from matplotlib.ticker import MaxNLocator  # pylint: disable=g-import-not-at-top
  for ax in fig.axes:
    if ax.get_xlabel() == 'step':  # steps are whole: no tick at step 1.5
      ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  path = os.path.join(workdir, f'report_{name}.png')
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def _curves(plt, workdir, records, key: str, name: str, title: str) -> str:
  fig, ax = plt.subplots(figsize=(7, 4))
  steps, values = _series(records, 'train', key)
  ax.plot(steps, values, color='tab:blue', alpha=0.35, label='train (each log)')
  ax.plot(steps, moving_average(values), color='tab:blue', label='train (moving average)')
  for eval_key, color, label in ((key, 'tab:orange', 'eval'),
                                 (f'ema_{key}', 'tab:green', 'eval, EMA weights')):
    steps, values = _series(records, 'eval', eval_key)
    if steps:
      ax.plot(steps, values, 'o-', color=color, label=label)
  ax.set_xlabel('step')
  ax.set_ylabel(name)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  return _save(plt, fig, workdir, name)


def _learning_rate(plt, workdir, records) -> str:
  fig, ax = plt.subplots(figsize=(7, 3.5))
  steps, values = _series(records, 'train', 'lr')
  ax.plot(steps, values, color='tab:purple')
  ax.set_xlabel('step')
  ax.set_ylabel('learning rate')
  ax.set_title('Learning rate (at each log)')
  ax.grid(alpha=0.3)
  return _save(plt, fig, workdir, 'lr')


def _speed(plt, workdir, records) -> str:
  fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
  steps, values = _series(records, 'train', 'images_per_sec')
  top.plot(steps, values, color='tab:blue')
  top.set_ylabel('images/s')
  top.set_title('Training speed (each log interval)')
  steps, values = _series(records, 'train', 'mfu')
  bottom.plot(steps, [100 * v for v in values], color='tab:red')
  bottom.set_ylabel('MFU (%)')
  bottom.set_xlabel('step')
  for ax in (top, bottom):
    ax.grid(alpha=0.3)
  return _save(plt, fig, workdir, 'speed')


def _goodput(plt, workdir, attempts: list[dict]) -> str:
  fig, ax = plt.subplots(figsize=(7, 4))
  labels = [f'{i + 1}: steps {a["first_step"]}-{a["reached_step"]}'
            for i, a in enumerate(attempts)]
  bottoms = [0.0] * len(attempts)
  colors = plt.get_cmap('tab10').colors
  for part, color in zip(goodput.PARTS, colors):
    heights = [a['parts'][part] for a in attempts]
    ax.bar(labels, heights, bottom=bottoms, color=color, label=part.replace('_', ' '))
    bottoms = [b + h for b, h in zip(bottoms, heights)]
  run = goodput.summary(attempts)
  ax.set_xlabel('attempt (each start of the command)')
  ax.set_ylabel('wall time (s)')
  ax.set_title(f'Where the time went: goodput {100 * run["goodput"]:.0f}%, '
               f'{run["redone_steps"]} steps redone')
  ax.legend(loc='center left', bbox_to_anchor=(1.0, 0.5), fontsize='small')
  return _save(plt, fig, workdir, 'goodput')
