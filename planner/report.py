"""study.md and the study's plots, from the cells' rows (study.py)."""

import collections
import os

import numpy as np

from core import units

STUDY_FILE = 'study.md'
# The measured step phases shown per engine (the engine's step_phases less
# its wait).
PHASE_COLUMNS = {'ps': ('compute_s', 'push_s', 'update_s', 'pull_s'),
                 'allreduce': ('compute_s', 'allreduce_s', 'update_s')}
LINK_BOUND_DEFINITION = (
    'A cell is *link-bound* when the link time the planner predicts for its '
    'step (push + pull over the links for PS, the ring for all-reduce: '
    '`communication_s_planned`) exceeds the T_C it predicts, and '
    '*compute-bound* otherwise. Link-bound cells mostly check that the '
    'emulator paces the links as the formula assumes; compute-bound cells '
    'check T_C, the update and the host\'s own overheads.')


def engine_of(row) -> str:
  """The cell's engine; rows from before study.engines ran PS."""
  return row['cell'].get('engine', 'ps')


def communication_s(row) -> float:
  """The step's link time the planner predicted (rows from before
  communication_s_planned: the PS push and pull)."""
  if 'communication_s_planned' in row:
    return row['communication_s_planned']
  return 2 * row['direction_s_planned']  # a study from before the split


def link_bound(row) -> bool:
  """Whether the planner predicts more link time than compute for the cell
  (LINK_BOUND_DEFINITION); from its own predicted terms, not the engine's."""
  return communication_s(row) > row['compute_s_planned']


def mape(rows) -> float:
  """Mean absolute percentage error of the predicted step times (nan for none)."""
  return float(100 * np.mean([abs(r['error']) for r in rows])) if rows else float('nan')


def mape_split(rows) -> dict:
  """{'all' | 'link_bound' | 'compute_bound': (MAPE %, cells)}."""
  bound = [r for r in rows if link_bound(r)]
  free = [r for r in rows if not link_bound(r)]
  return {name: (mape(group), len(group)) for name, group in
          (('all', rows), ('link_bound', bound), ('compute_bound', free))}


# Cell keys that studies from before them did not have, and what they meant.
_CELL_DEFAULTS = {'devices_per_host': 1, 'algorithm': 'ring'}


def _key(row, *names):
  return tuple(row['cell'].get(n, _CELL_DEFAULTS.get(n)) for n in names)


def shards_needed(rows, tolerance: float = 0.05) -> dict:
  """(model, N_w, batch, bandwidth) -> the fewest shards whose measured
  throughput is within `tolerance` of the best over the shard counts."""
  groups = collections.defaultdict(dict)
  for r in rows:
    groups[_key(r, 'model', 'num_workers', 'batch_size', 'bandwidth_gbps',
                'devices_per_host')][
        r['cell']['num_shards']] = r['images_per_sec']
  return {k: min(n for n, v in g.items() if v >= (1 - tolerance) * max(g.values()))
          for k, g in groups.items()}


def findings(rows) -> list[tuple[str, bool, str]]:
  """The study's four findings: (claim, supported by the measurement, evidence).

  The first three compare PS cells of the flat cluster (one worker a host,
  the seed study's setting) with each other; the fourth compares PS with
  all-reduce, both measured when the study ran the all-reduce engine.
  """
  everything, rows = rows, [r for r in rows if engine_of(r) == 'ps' and
                            _key(r, 'devices_per_host') == (1,)]
  if not rows:
    return []
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
      'mean shards needed (within 5% of the best): '
      + ', '.join(f'{m} {by_model[m]:.2f} ({heaviness[m] / 1e6:.0f} MB per '
                  'compute-second)' for m in models)))

  batches = sorted({r['cell']['batch_size'] for r in rows})
  pairs = []
  for (m, n, b, bw, g), v in needed.items():
    if b == batches[0] and (m, n, batches[-1], bw, g) in needed:
      pairs.append((v, needed[(m, n, batches[-1], bw, g)]))
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
    link_s = n * many['model_bytes'] / (
        n_ps * units.gbps_to_bytes_per_s(many['cell']['bandwidth_gbps']))
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

  out.append(_allreduce_finding(rows, [r for r in everything
                                       if engine_of(r) == 'allreduce']))
  return out


def _allreduce_finding(ps_rows, ring_rows) -> tuple[str, bool, str]:
  """Finding (d): PS's step against all-reduce's in the same setting, both
  measured; without all-reduce cells (studies from before the engine), the
  planner's ring formula stands in for the all-reduce side."""
  setting = ('model', 'num_workers', 'batch_size', 'bandwidth_gbps', 'devices_per_host')
  ring_rows = [r for r in ring_rows if _key(r, 'algorithm') == ('ring',)]
  ring = {_key(r, *setting): r['measured_step_s'] for r in ring_rows}
  close = {True: [], False: []}
  for r in ps_rows:
    if ring_rows and _key(r, *setting) not in ring:
      continue
    other = ring[_key(r, *setting)] if ring_rows else r['allreduce_step_s_predicted']
    close[r['cell']['num_shards'] >= r['cell']['num_workers']].append(
        abs(r['measured_step_s'] / other - 1))
  mean = {k: float(np.mean(v)) if v else float('nan') for k, v in close.items()}
  if ring_rows:
    how = ('mean |PS measured / all-reduce measured - 1| in the same setting',
           'both engines measured over the same paced links')
  else:
    how = ('mean |PS measured / ring all-reduce predicted - 1|',
           'no all-reduce cell in this study, so the all-reduce side is the '
           'planner\'s ring formula with the same T_C and link')
  return (
      'All-reduce matches PS only when N_ps is comparable to N_w',
      bool(close[True]) and bool(close[False]) and mean[True] < mean[False],
      f'{how[0]}: {mean[True]:.2f} with N_ps >= N_w ({len(close[True])} cells), '
      f'{mean[False]:.2f} with N_ps < N_w ({len(close[False])}); {how[1]}')


def _plots(rows, workdir: str) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  files = []
  everything, rows = rows, [r for r in rows if engine_of(r) == 'ps']
  if rows:
    files += _ps_plots(rows, workdir, plt)
  files.append(_predicted_vs_measured_plot(everything, workdir, plt))
  return files


def _ps_plots(rows, workdir: str, plt) -> list[str]:
  """Step time against N_ps, and throughput against N_w, of the PS cells."""
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
  return files


def _predicted_vs_measured_plot(rows, workdir: str, plt) -> str:
  fig, ax = plt.subplots(figsize=(5, 5))
  engines = sorted({engine_of(r) for r in rows})
  for engine in engines:
    for model in sorted({r['cell']['model'] for r in rows}):
      mine = [r for r in rows if r['cell']['model'] == model and engine_of(r) == engine]
      if mine:
        label = model if len(engines) == 1 else f'{model}, {engine}'
        ax.plot([r['measured_step_s'] for r in mine],
                [r['predicted_step_s'] for r in mine],
                'o' if engine == 'ps' else 's', label=label)
  top = max(max(r['measured_step_s'], r['predicted_step_s']) for r in rows) * 1.05
  ax.plot([0, top], [0, top], 'k--', label='y = x')
  ax.set(xlabel='measured step time (s)', ylabel='predicted step time (s)',
         title=f'MAPE {mape(rows):.1f}% over {len(rows)} cells')
  ax.legend(fontsize=7)
  return _save(fig, workdir, 'study_predicted_vs_measured.png')


def _save(fig, workdir: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, name), dpi=100)
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  plt.close(fig)
  return name


def _percent(value: float) -> str | None:
  """A MAPE for the summary: None where no cell had it (JSON has no nan)."""
  return None if np.isnan(value) else value


def summarize(rows) -> dict:
  """The study's figures: MAPE over all cells, link-bound and compute-bound
  ones (and per engine), and the worst cell."""
  worst = max(rows, key=lambda r: abs(r['error']))
  split = mape_split(rows)
  return {
      'cells': len(rows), 'mape_percent': split['all'][0],
      'mape_link_bound_percent': _percent(split['link_bound'][0]),
      'link_bound_cells': split['link_bound'][1],
      'mape_compute_bound_percent': _percent(split['compute_bound'][0]),
      'compute_bound_cells': split['compute_bound'][1],
      'mape_percent_by_engine': {e: mape([r for r in rows if engine_of(r) == e])
                                 for e in sorted({engine_of(r) for r in rows})},
      'worst_cell': worst['cell'], 'worst_error_percent': 100 * worst['error'],
      # Which way the predictions lean: MAPE alone hides a bias.
      'mean_error_percent': 100 * float(np.mean([r['error'] for r in rows])),
      'cells_within_15_percent': sum(abs(r['error']) <= 0.15 for r in rows)}


def _mape_table(rows) -> list[str]:
  """MAPE (cells) per engine and over all, for all, link- and compute-bound cells."""
  def cell(group):
    value, count = group
    return f'{value:.1f}% ({count})' if count else '- (0)'
  engines = sorted({engine_of(r) for r in rows})
  groups = [(e, [r for r in rows if engine_of(r) == e]) for e in engines]
  if len(engines) > 1:
    groups.append(('all engines', rows))
  per_host = sorted({_key(r, 'devices_per_host')[0] for r in rows})
  if len(per_host) > 1:  # a grid over hosts: how each host size is predicted
    groups += [(f'all engines, G = {g}',
                [r for r in rows if _key(r, 'devices_per_host') == (g,)]) for g in per_host]
  lines = ['| cells | all cells | link-bound | compute-bound |', '|---|---|---|---|']
  for name, group in groups:
    split = mape_split(group)
    lines.append(f'| {name} | {cell(split["all"])} | {cell(split["link_bound"])} | '
                 f'{cell(split["compute_bound"])} |')
  return lines


def _cells_table(engine: str, rows) -> list[str]:
  """One engine's cells: measured and predicted step, and the measured phases."""
  phases = PHASE_COLUMNS.get(engine, ('compute_s',))
  shards = engine == 'ps'
  head = (['model', 'N_w', 'G'] + (['N_ps'] if shards else ['algorithm']) +
          ['Gbit/s', 'batch', 'measured s', 'predicted s', 'error', 'bound', 'images/s'] +
          [p[:-len('_s')] for p in phases] + (['overhead planned'] if shards else []) +
          ['kernel CPU s/step', 'kernel CPU s/T_C run'])
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for r in rows:
    c = r['cell']
    values = ([c['model'], c['num_workers'], *_key(r, 'devices_per_host')] +
              ([c['num_shards']] if shards else list(_key(r, 'algorithm'))) +
              [f'{c["bandwidth_gbps"]:g}', c['batch_size'], f'{r["measured_step_s"]:.3f}',
               f'{r["predicted_step_s"]:.3f}', f'{100 * r["error"]:+.1f}%',
               'link' if link_bound(r) else 'compute', f'{r["images_per_sec"]:.0f}'] +
              [f'{r[p]:.3f}' if p in r else '-' for p in phases])
    if shards:
      values.append(_seconds(r.get('overhead_s_planned')))
    # Rows of studies from before the CPU was counted have neither figure.
    values += [_seconds(r.get('step_kernel_cpu_s')),
               _seconds(r.get('compute_kernel_cpu_s_planned'))]
    lines.append('| ' + ' | '.join(map(str, values)) + ' |')
  return lines


def _seconds(value) -> str:
  return '-' if value is None else f'{value:.3f}'


def _sampling(rows) -> str:
  """How the rows' planner figures were taken, in words: sampled between
  the engine's steps (rows that count their samples), or before and after
  the cell (rows of studies from before the sampling)."""
  if all('planner_samples' in r for r in rows):
    return ("measured by the planner once before the engine starts and after "
            "each of its timed steps, the median of those samples")
  if any('planner_samples' in r for r in rows):
    return ('measured by the planner before and after the cell, or, in rows '
            'with planner_samples, between its timed steps')
  return ('measured by the planner just before and just after the cell, mean '
          'of the two medians')


def write_study(rows, workdir: str) -> dict:
  """Writes study.md and the PNGs; returns the summary (MAPE, worst cell)."""
  summary = summarize(rows)
  split = mape_split(rows)
  plots = _plots(rows, workdir)
  engines = sorted({engine_of(r) for r in rows})
  counts = ', '.join(f'{sum(engine_of(r) == e for r in rows)} {e}' for e in engines)
  lines = [
      '# Study: the emulated engines against the planner', '',
      f'{len(rows)} cells ({counts}); mean absolute percentage error of the '
      f'predicted step time **{summary["mape_percent"]:.1f}%** '
      f'(link-bound cells {split["link_bound"][0]:.1f}% over {split["link_bound"][1]}, '
      f'compute-bound cells {split["compute_bound"][0]:.1f}% over '
      f'{split["compute_bound"][1]}); mean signed error '
      f'{summary["mean_error_percent"]:+.1f}%; {summary["cells_within_15_percent"]} of '
      f'{len(rows)} cells within 15%; worst cell {summary["worst_cell"]} at '
      f'{summary["worst_error_percent"]:+.1f}%.', '',
      *_mape_table(rows), '',
      LINK_BOUND_DEFINITION, '',
      'Measured: each engine\'s step, median of the timed steps. Predicted for '
      f'PS: T_C (the workers\' program alone, {_sampling(rows)}) + push + '
      'update + pull from the planner\'s formulas with its measured S and '
      'update time and the configured link, + the host\'s copies to and from '
      'the devices, + the overhead of the emulation, measured by the planner '
      'without links: the host\'s copies and hand-offs of a push and a pull '
      'that the link does not hide (each message\'s first chunk is copied '
      'before the link starts on it) and the step\'s fixed bookkeeping. Predicted '
      'for all-reduce: T_C + the ring steps over the links from the '
      'planner\'s cluster model (allreduce_phases) + the host\'s work of '
      'the rings, measured by the planner without links, where the links do '
      'not hide it + the copies to and from the devices + the workers\' '
      'update program + the step\'s fixed bookkeeping, each measured by the '
      'planner as T_C is. G is the workers per emulated host, which share '
      'one NIC. The kernel CPU columns are the process\'s kernel CPU seconds '
      '(all threads) per engine step (median of the timed steps) and per run '
      'of the workers\' program in the planner\'s samples (median): the '
      'kernel\'s work of faulting in fresh memory, which the prediction does '
      'not model, shows there.', '',
      '## Findings', '']
  for claim, supported, evidence in findings(rows):
    lines.append(f'- **{claim}**: {"supported" if supported else "not supported"} '
                 f'by the measurement. {evidence}.')
  for engine in engines:
    lines += ['', f'## Cells: {engine}', '',
              *_cells_table(engine, [r for r in rows if engine_of(r) == engine])]
  lines += ['', '## Plots', ''] + [f'![{p}]({p})' for p in plots]
  with open(os.path.join(workdir, STUDY_FILE), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  return summary
