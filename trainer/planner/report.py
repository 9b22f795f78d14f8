"""study.md and the study's plots, from the cells' rows (study.py)."""

import collections
import os

import numpy as np

STUDY_FILE = 'study.md'


def mape(rows) -> float:
  """Mean absolute percentage error of the predicted step times."""
  return float(100 * np.mean([abs(r['error']) for r in rows]))


def _key(row, *names):
  return tuple(row['cell'][n] for n in names)


def shards_needed(rows, tolerance: float = 0.05) -> dict:
  """(model, N_w, batch, bandwidth) -> the fewest shards whose measured
  throughput is within `tolerance` of the best over the shard counts."""
  groups = collections.defaultdict(dict)
  for r in rows:
    groups[_key(r, 'model', 'num_workers', 'batch_size', 'bandwidth_gbps')][
        r['cell']['num_shards']] = r['images_per_sec']
  return {k: min(n for n, v in g.items() if v >= (1 - tolerance) * max(g.values()))
          for k, g in groups.items()}


def findings(rows) -> list[tuple[str, bool, str]]:
  """The study's four findings: (claim, supported by the measurement, evidence)."""
  needed = shards_needed(rows)
  models = sorted({r['cell']['model'] for r in rows})
  # Communication-heavy: more bytes per second of compute.
  heaviness = {m: np.mean([r['model_bytes'] / r['compute_s_planned']
                           for r in rows if r['cell']['model'] == m]) for m in models}
  by_model = {m: float(np.mean([v for k, v in needed.items() if k[0] == m])) for m in models}
  heavy, light = max(models, key=heaviness.get), min(models, key=heaviness.get)
  out = []
  out.append((
      'Communication-heavy models need more PS shards than compute-heavy ones '
      'to reach their best throughput',
      len(models) > 1 and by_model[heavy] > by_model[light],
      f'mean shards needed (within 5% of the best): '
      + ', '.join(f'{m} {by_model[m]:.2f} ({heaviness[m] / 1e6:.0f} MB per '
                  'compute-second)' for m in models)))

  batches = sorted({r['cell']['batch_size'] for r in rows})
  pairs = []
  for (m, n, b, bw), v in needed.items():
    if b == batches[0] and (m, n, batches[-1], bw) in needed:
      pairs.append((v, needed[(m, n, batches[-1], bw)]))
  lower = sum(large < small for small, large in pairs)
  higher = sum(large > small for small, large in pairs)
  out.append((
      'A larger mini-batch lowers the number of shards needed',
      bool(pairs) and lower > 0 and higher == 0,
      f'batch {batches[0]} -> {batches[-1]}: fewer shards needed in {lower}, '
      f'more in {higher}, the same in {len(pairs) - lower - higher} of '
      f'{len(pairs)} settings'))

  gains = {True: [], False: []}
  groups = collections.defaultdict(dict)
  for r in rows:
    groups[_key(r, 'model', 'batch_size', 'bandwidth_gbps', 'num_shards')][
        r['cell']['num_workers']] = r
  for g in groups.values():
    if len(g) < 2:
      continue
    few, many = g[min(g)], g[max(g)]
    n, n_ps = many['cell']['num_workers'], many['cell']['num_shards']
    link_s = n * many['model_bytes'] / (n_ps * many['cell']['bandwidth_gbps'] * 1e9 / 8)
    gains[link_s > many['compute_s_planned']].append(
        many['images_per_sec'] / few['images_per_sec'])
  bound, free = gains[True], gains[False]
  out.append((
      'Throughput stops growing once N_w*S/(N_ps*B) exceeds T_C',
      bool(bound) and bool(free) and np.mean(bound) < min(1.0, np.mean(free)),
      f'throughput ratio from the fewest to the most workers: {np.mean(bound):.2f} '
      f'where the shard link exceeds T_C ({len(bound)} settings), '
      f'{np.mean(free) if free else float("nan"):.2f} where it does not '
      f'({len(free)}); the emulated workers share this host\'s cores, so '
      'compute alone does not grow with N_w here' if bound else
      'no setting where the shard link exceeds T_C'))

  close = {True: [], False: []}
  for r in rows:
    ratio = r['measured_step_s'] / r['allreduce_step_s_predicted']
    close[r['cell']['num_shards'] >= r['cell']['num_workers']].append(abs(ratio - 1))
  out.append((
      'All-reduce matches PS only when N_ps is comparable to N_w',
      bool(close[True]) and bool(close[False]) and
      np.mean(close[True]) < np.mean(close[False]),
      f'mean |PS measured / ring all-reduce predicted - 1|: '
      f'{np.mean(close[True]):.2f} with N_ps >= N_w, '
      f'{np.mean(close[False]) if close[False] else float("nan"):.2f} with N_ps < N_w '
      '(SPMD collectives between emulated devices of one host are not paced, '
      'so the all-reduce side is the planner\'s ring formula with the same T_C '
      'and link)'))
  return out


def _plots(rows, workdir: str) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  files = []
  models = sorted({r['cell']['model'] for r in rows})
  bandwidths = sorted({r['cell']['bandwidth_gbps'] for r in rows})
  n_max = max(r['cell']['num_workers'] for r in rows)
  b_max = max(r['cell']['batch_size'] for r in rows)

  fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
  for ax, model in zip(axes[0], models):
    for bw in bandwidths:
      cells = sorted((r['cell']['num_shards'], r['measured_step_s'], r['predicted_step_s'])
                     for r in rows if r['cell']['model'] == model and
                     r['cell']['bandwidth_gbps'] == bw and
                     r['cell']['num_workers'] == n_max and r['cell']['batch_size'] == b_max)
      if not cells:
        continue
      x, measured, predicted = zip(*cells)
      line, = ax.plot(x, predicted, label=f'{bw:g} Gbit/s predicted')
      ax.plot(x, measured, 'o', color=line.get_color(), label=f'{bw:g} Gbit/s measured')
    ax.set(title=f'{model}: {n_max} workers, batch {b_max}', xlabel='PS shards N_ps',
           ylabel='step time (s)', xticks=sorted({r['cell']['num_shards'] for r in rows}))
    ax.legend(fontsize=7)
  files.append(_save(fig, workdir, 'study_step_time_vs_shards.png'))

  fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
  for ax, model in zip(axes[0], models):
    for n_ps in sorted({r['cell']['num_shards'] for r in rows}):
      cells = sorted((r['cell']['num_workers'], r['images_per_sec']) for r in rows
                     if r['cell']['model'] == model and r['cell']['num_shards'] == n_ps
                     and r['cell']['bandwidth_gbps'] == bandwidths[0]
                     and r['cell']['batch_size'] == b_max)
      if cells:
        ax.plot(*zip(*cells), marker='o', label=f'N_ps = {n_ps}')
    ax.set(title=f'{model}: {bandwidths[0]:g} Gbit/s, batch {b_max}',
           xlabel='workers N_w', ylabel='images/s (measured)',
           xticks=sorted({r['cell']['num_workers'] for r in rows}))
    ax.legend(fontsize=7)
  files.append(_save(fig, workdir, 'study_throughput_vs_workers.png'))

  fig, ax = plt.subplots(figsize=(5, 5))
  for model in models:
    mine = [r for r in rows if r['cell']['model'] == model]
    ax.plot([r['measured_step_s'] for r in mine], [r['predicted_step_s'] for r in mine],
            'o', label=model)
  top = max(max(r['measured_step_s'], r['predicted_step_s']) for r in rows) * 1.05
  ax.plot([0, top], [0, top], 'k--', label='y = x')
  ax.set(xlabel='measured step time (s)', ylabel='predicted step time (s)',
         title=f'MAPE {mape(rows):.1f}% over {len(rows)} cells')
  ax.legend(fontsize=7)
  files.append(_save(fig, workdir, 'study_predicted_vs_measured.png'))
  return files


def _save(fig, workdir: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, name), dpi=100)
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  plt.close(fig)
  return name


def write_study(rows, workdir: str) -> dict:
  """Writes study.md and the PNGs; returns the summary (MAPE, worst cell)."""
  worst = max(rows, key=lambda r: abs(r['error']))
  summary = {'cells': len(rows), 'mape_percent': mape(rows),
             'worst_cell': worst['cell'], 'worst_error_percent': 100 * worst['error']}
  plots = _plots(rows, workdir)
  lines = [
      '# Study: the parameter-server engine against the planner', '',
      f'{len(rows)} cells; mean absolute percentage error of the predicted step '
      f'time **{summary["mape_percent"]:.1f}%**; worst cell {worst["cell"]} at '
      f'{summary["worst_error_percent"]:+.1f}%.', '',
      'Measured: the synchronous PS engine, median of the timed steps. '
      'Predicted: T_C (the workers\' program alone, measured by the planner '
      'just before and just after the cell, mean of the two medians) + push + '
      'update + pull from the planner\'s formulas with its measured S, update '
      'time and host copy speed, and the configured link.', '',
      '## Findings', '']
  for claim, supported, evidence in findings(rows):
    lines.append(f'- **{claim}**: {"supported" if supported else "not supported"} '
                 f'by the measurement. {evidence}.')
  lines += ['', '## Cells', '',
            '| model | N_w | N_ps | Gbit/s | batch | measured s | predicted s | error | '
            'images/s | compute | push | update | pull |',
            '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    c = r['cell']
    lines.append(
        f'| {c["model"]} | {c["num_workers"]} | {c["num_shards"]} | '
        f'{c["bandwidth_gbps"]:g} | {c["batch_size"]} | {r["measured_step_s"]:.3f} | '
        f'{r["predicted_step_s"]:.3f} | {100 * r["error"]:+.1f}% | '
        f'{r["images_per_sec"]:.0f} | {r["compute_s"]:.3f} | {r["push_s"]:.3f} | '
        f'{r["update_s"]:.3f} | {r["pull_s"]:.3f} |')
  lines += ['', '## Plots', ''] + [f'![{p}]({p})' for p in plots]
  with open(os.path.join(workdir, STUDY_FILE), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  return summary
