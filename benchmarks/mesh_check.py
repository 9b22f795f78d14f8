"""The mesh planner fed a probe, against real SPMD steps of every candidate.

For each layout of 8 CPU devices (one process of 8; two processes of 4,
joined over gloo on 127.0.0.1, each pinned to its own core as a host of its
own would be), or with --layouts=1x2,2x1 of 2 devices that each own one of
the machine's 2 cores (one process of 2; two processes of 1), and each
model: `--mode=probe` on that layout; then, for each
global batch, `--mode=plan --config.plan.parallelism=mesh
--config.plan.probe=...`, which predicts every candidate's step from
probe.json alone (planner/mesh_plan.py); then the same processes take real
steps of every candidate the plan costs that fits, its entries and the
first rungs it did not climb (this script's --worker: the trainer's SPMD
train step, trainer/engines/spmd, compiled for that mesh,
on its sharded state and a random batch), the median of --steps after two
untimed, each waited for. Memory: the trainer's start-up figure (XLA's
analysis of the compiled step, trainer/memory.py) beside the plan's, and
the runtime's live peak where the device reports one (a CPU device reports
none: null).

One JSON line per probe (what its plans are costed from: the fits of its
collectives on a mesh's groups, its step's fixed cost, its compute points)
and per candidate, with their provenance (benchmarks/provenance.py);
--out also appends them to a file; per (layout, model, batch) a summary line
(MAPE, worst cell, the plan's choice against the measured fastest, Spearman's
rank correlation, the spread of the timed steps, and how far its measured and
predicted steps moved from the run of the same cells already in --out, if
any: each run probes, plans and measures afresh); per (layout, model) the
floor of the costing's form (form_floor); a Markdown table on standard error.

After a (layout, model)'s cells the script probes again and plans each
batch from that probe too: each candidate's `predicted_after_step_s`, each
group's MAPE from it and how far its predictions moved from the first
probe's, and the second probe's `compute_moved` (its timed compute against
the first's). Each probe predicts the cells alone; the two say whether the
probe and the steps saw the same machine.

  .venv/bin/python benchmarks/mesh_check.py --out=results/plan/mesh_check.jsonl
  .venv/bin/python benchmarks/mesh_check.py --layouts=1x2,2x1 --out=results/plan/mesh_check.jsonl
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

MODELS = {  # name -> flags of the model: widths for 2 cores, 32 px synthetic data
    'resnet18_w16': ['--config.model.name=resnet18', '--config.model.width=16'],
    # 4 heads of 64: the tensor axis splits it 2 or 4 ways; 4 blocks, which
    # the plan derives from compiles of 1 and 2 (plan.mesh_derive).
    'vit_w256_d4': ['--config.model.name=vit_ti16', '--config.model.width=256',
                    '--config.model.depth=4'],
}
COMMON = ['--config=configs/quickstart.py', '--config.data.source=synthetic',
          '--config.data.image_size=32']
# processes x devices per process: the check's 8 devices (the default), and
# 2 devices that own a core each (one process of 2; two processes of 1).
LAYOUTS = {'1x8': (1, 8), '2x4': (2, 4), '1x2': (1, 2), '2x1': (2, 1)}


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('XLA_FLAGS', None)
  return env


def _launch(layout: str, command: list[str]) -> None:
  """`command` (after the python executable) on the layout's processes;
  two processes are joined on 127.0.0.1 and pinned to a core each."""
  processes, devices = LAYOUTS[layout]
  if processes == 1:
    commands = [[sys.executable, *command, f'--config.runtime.num_cpu_devices={devices}']]
  else:
    from cli import launcher  # pylint: disable=g-import-not-at-top
    port = launcher.free_port()
    cores = os.cpu_count() or 1
    commands = [['taskset', '-c', str(i % cores), sys.executable, *command,
                 f'--coordinator_address=127.0.0.1:{port}', f'--num_processes={processes}',
                 f'--process_id={i}', f'--config.runtime.num_cpu_devices={devices}']
                for i in range(processes)]
  running = [subprocess.Popen(c, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in commands]
  outputs = [p.communicate() for p in running]
  for i, (p, (_, err)) in enumerate(zip(running, outputs)):
    if p.returncode != 0:
      raise RuntimeError(f'process {i} of {" ".join(command)} failed ({p.returncode}): '
                         f'{err[-3000:]}')


def _spearman(xs: list[float], ys: list[float]) -> float:
  rank = lambda v: {i: r for r, i in enumerate(sorted(range(len(v)), key=v.__getitem__))}
  rx, ry = rank(xs), rank(ys)
  n = len(xs)
  if n < 2:
    return 1.0
  return 1 - 6 * sum((rx[i] - ry[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


def _probe(layout: str, flags: list[str], probe_dir: str, per_device: str, when: str) -> dict:
  """`--mode=probe` on the layout; what its plans are costed from."""
  _launch(layout, ['main.py', *flags, f'--workdir={probe_dir}', '--mode=probe',
                   f'--config.plan.per_worker_batch_sizes={per_device}'])
  with open(os.path.join(probe_dir, 'probe.json')) as f:
    probe = json.load(f)
  return {'when': when,
          'mesh_collectives': (probe['mesh_collectives'] or {}).get('fits'),
          'step_fixed_cost': {k: probe['step_fixed_cost'][k]
                              for k in ('fixed_cost_s', 'per_operand_s')},
          'compute_points': [{k: q[k] for k in ('per_device_batch', 'compute_s',
                                                'tree_compute_s', 'flops')}
                             for q in probe['compute']['points']],
          'update_s': probe['update']['update_s'], 'probe_elapsed_s': probe['elapsed_s']}


def _plan(flags: list[str], plan_dir: str, probe_dir: str, batch: int) -> dict:
  """The mesh plan of `batch` from the probe in `probe_dir` (a plan again
  in the same work dir reuses its compiles)."""
  result = subprocess.run(
      [sys.executable, 'main.py', *flags, f'--workdir={plan_dir}', '--mode=plan',
       '--config.plan.parallelism=mesh', f'--config.plan.probe={probe_dir}',
       f'--config.batch_size={batch}'], cwd=REPO, env=_env(), capture_output=True, text=True)
  if result.returncode != 0:
    raise RuntimeError(f'the plan of {plan_dir} failed: {result.stderr[-3000:]}')
  with open(os.path.join(plan_dir, 'plan.json')) as f:
    return json.load(f)


def compute_moved(before: dict, after: dict) -> float:
  """How far the probe's timed compute moved from the probe before the
  cells to the one after them: the mean relative difference over its
  batches, each timed as the plan reads it (planner/mesh_from_probe.py's
  compute_rates: the gradients as a tree where the probe timed them; the
  same FLOPs at a batch, so the rates move as the times)."""
  from planner import mesh_from_probe  # pylint: disable=g-import-not-at-top
  first = dict(mesh_from_probe.compute_rates(before['compute_points']))
  return statistics.mean(abs(rate / first[b] - 1)
                         for b, rate in mesh_from_probe.compute_rates(after['compute_points'])
                         if b in first)


def check(layout: str, model: str, batches: list[int], steps: int, root: str) -> list[dict]:
  flags = [*COMMON, *MODELS[model]]
  devices = LAYOUTS[layout][0] * LAYOUTS[layout][1]
  probe_dir = os.path.join(root, f'probe_{layout}_{model}')
  # The batch a device works on under every mesh (the global batch over
  # data x fsdp, a divisor of the devices): the plan costs each mesh's
  # compute at the probe's rate at its batch.
  per_device = ','.join(str(b) for b in sorted({
      batch // shards for batch in batches
      for shards in range(1, devices + 1) if devices % shards == 0}))
  probe = _probe(layout, flags, probe_dir, per_device, 'before the cells')
  rows = [{'kind': 'probe', 'layout': layout, 'model': model, **probe}]
  for batch in batches:
    plan_dir = os.path.join(root, f'plan_{layout}_{model}_{batch}')
    plan = _plan(flags, plan_dir, probe_dir, batch)
    plan_path = os.path.join(plan_dir, 'plan.json')  # planned again from the second probe below
    measured_path = os.path.join(plan_dir, 'measured.json')
    _launch(layout, [os.path.abspath(__file__), '--worker', f'--plan={plan_path}',
                     f'--measured={measured_path}', f'--steps={steps}', *flags,
                     f'--config.batch_size={batch}'])
    with open(measured_path) as f:
      measured = json.load(f)
    for row in candidates(plan):
      m = measured[row['name']]
      rows.append({
          'kind': 'candidate', 'layout': layout, 'model': model, 'global_batch': batch,
          'configuration': row['name'], 'chosen': row['name'] == plan['best'],
          'predicted_step_s': row['step_s'], 'measured_step_s': m['step_s'],
          'measured_steps_s': m['steps_s'],
          'error': row['step_s'] / m['step_s'] - 1,
          'predicted_compute_s': row['compute_s'],
          'predicted_communication_s': row['communication_s'],
          'flops': row['flops'], 'bytes_accessed': row['bytes_accessed'],
          'collectives': row['collectives'],
          'collectives_by_group': row['collectives_by_group'],
          'planned_peak_bytes': row['peak'], 'trainer_peak_bytes': m['peak_bytes'],
          'live_peak_bytes': m['live_peak_bytes'],
          'derived_from_depths': row['derived_from_depths']})
  # The same probe again after the cells, and each batch planned from it:
  # whether the probe and the steps saw the same machine (each probe
  # predicts the cells alone; neither is fitted to them).
  after = _probe(layout, flags, probe_dir + '_after', per_device, 'after the cells')
  rows.insert(1, {'kind': 'probe', 'layout': layout, 'model': model, **after,
                  'compute_moved': compute_moved(probe, after)})
  for batch in batches:
    again = _plan(flags, os.path.join(root, f'plan_{layout}_{model}_{batch}'),
                  probe_dir + '_after', batch)
    steps_after = {r['name']: r['step_s'] for r in again['fitting'] + again['not_climbed']}
    for r in rows:
      if r['kind'] == 'candidate' and r['global_batch'] == batch:
        r['predicted_after_step_s'] = steps_after.get(r['configuration'])
  return rows


def candidates(plan: dict) -> list[dict]:
  """Every configuration the plan costed that fits: its entries, and the
  first rungs it did not climb (a first rung that fits is its mesh's entry;
  the plan only stopped looking once three entries were faster)."""
  return plan['fitting'] + [r for r in plan['not_climbed'] if r['fits']]


def summary(rows: list[dict]) -> dict:
  """MAPE, the worst cell, the choice against the measured fastest and the
  rank correlation of one (layout, model, batch) group."""
  errors = [abs(r['error']) for r in rows]
  fastest = min(rows, key=lambda r: r['measured_step_s'])
  chosen = next(r for r in rows if r['chosen'])
  return {
      'layout': rows[0]['layout'], 'model': rows[0]['model'],
      'global_batch': rows[0]['global_batch'], 'candidates': len(rows),
      'mape': statistics.mean(errors), 'worst_error': max(errors),
      'chosen': chosen['configuration'], 'measured_fastest': fastest['configuration'],
      'chosen_over_fastest': chosen['measured_step_s'] / fastest['measured_step_s'] - 1,
      'spearman': _spearman([r['predicted_step_s'] for r in rows],
                            [r['measured_step_s'] for r in rows]),
      'memory_equal': all(r['planned_peak_bytes'] == r['trainer_peak_bytes'] for r in rows),
      'step_spread': statistics.median(statistics.pstdev(r['measured_steps_s'])
                                       / r['measured_step_s'] for r in rows),
      **from_the_probe_after(rows)}


def from_the_probe_after(rows: list[dict]) -> dict:
  """The MAPE of the predictions from the probe after the cells, and how
  far they moved from those of the probe before them (the mean relative
  difference), over the cells both plans costed; None where there are none."""
  pairs = [(r, r['predicted_after_step_s']) for r in rows if r.get('predicted_after_step_s')]
  if not pairs:
    return {'mape_probe_after': None, 'probe_after_moved': None}
  return {'mape_probe_after': statistics.mean(abs(a / r['measured_step_s'] - 1) for r, a in pairs),
          'probe_after_moved': statistics.mean(abs(a / r['predicted_step_s'] - 1)
                                               for r, a in pairs)}


def _cell(row: dict) -> tuple:
  return row['layout'], row['model'], row['global_batch'], row['configuration']


def earlier_cells(path: str) -> list[dict]:
  """Each cell's latest record already in `path`, whichever run it was in
  (a run of other layouts or models in between leaves it be); none: []."""
  if not path or not os.path.exists(path):
    return []
  with open(path) as f:
    cells = [r for r in map(json.loads, filter(str.strip, f)) if r['kind'] == 'candidate']
  latest = {}
  for r in cells:
    if _cell(r) not in latest or r['date'] >= latest[_cell(r)]['date']:
      latest[_cell(r)] = r
  return list(latest.values())


def against_earlier(rows: list[dict], earlier: list[dict]) -> dict:
  """How far one group's cells moved from the earlier run of the same
  cells: the mean relative difference of the measured steps, and of the
  predictions (each run probes afresh); None without an earlier run."""
  before = {_cell(r): r for r in earlier}
  pairs = [(r, before[_cell(r)]) for r in rows if _cell(r) in before]
  if not pairs:
    return {'earlier_run': None, 'repeat_cells': 0, 'repeat_measured_difference': None,
            'repeat_predicted_difference': None}
  moved = lambda key: statistics.mean(abs(r[key] / e[key] - 1) for r, e in pairs)
  return {'earlier_run': {k: pairs[0][1][k] for k in ('date', 'commit')},
          'repeat_cells': len(pairs),
          'repeat_measured_difference': moved('measured_step_s'),
          'repeat_predicted_difference': moved('predicted_step_s')}


FLOOR_TERMS = ('flops', 'bytes_accessed', 'predicted_communication_s')


def form_floor(rows: list[dict]) -> dict:
  """How close any weighting of the plan's own terms comes to these
  measured steps: measured = a x FLOPs + b x bytes accessed + c x the
  collectives as costed + d, fitted to the measured cells themselves (least
  squares of the relative error). Not a prediction: what no re-weighting of
  the costing's terms could beat on these cells, beside the noise of the
  steps themselves (summary's step_spread)."""
  terms = np.array([[r[k] for k in FLOOR_TERMS] + [1.0] for r in rows])
  measured = np.array([r['measured_step_s'] for r in rows])
  weights, *_ = np.linalg.lstsq(terms / measured[:, None], np.ones(len(rows)), rcond=None)
  errors = np.abs(terms @ weights / measured - 1)
  return {'layout': rows[0]['layout'], 'model': rows[0]['model'], 'cells': len(rows),
          'mape': float(errors.mean()), 'worst_error': float(errors.max()),
          'weights': dict(zip((*FLOOR_TERMS, 'constant_s'), map(float, weights)))}


def worker(argv: list[str]) -> None:
  """One process of a layout: real steps of every candidate of --plan."""
  parser = argparse.ArgumentParser()
  parser.add_argument('--worker', action='store_true')
  parser.add_argument('--plan')
  parser.add_argument('--measured')
  parser.add_argument('--steps', type=int)
  parser.add_argument('--coordinator_address', default=None)
  parser.add_argument('--num_processes', type=int, default=1)
  parser.add_argument('--process_id', type=int, default=0)
  args, config_flags = parser.parse_known_args(argv)
  # pylint: disable=g-import-not-at-top
  from cli import config_loader
  from cli import runtime
  runtime.restart_with_malloc_tunables()  # as main.py runs, before anything allocates
  recipe = next(f.split('=', 1)[1] for f in config_flags if f.startswith('--config='))
  overrides = [tuple(f[len('--config.'):].split('=', 1)) for f in config_flags
               if f.startswith('--config.')]
  config = config_loader.build_config(recipe, overrides, '', recipe)
  runtime.initialize(num_cpu_devices=config.runtime.num_cpu_devices,
                     coordinator_address=args.coordinator_address,
                     num_processes=args.num_processes, process_id=args.process_id)
  import jax
  from planner import mesh_timing
  with open(args.plan) as f:
    plan = json.load(f)
  results = mesh_timing.time_configurations(config, candidates(plan), args.steps,
                                            config.data.num_synthetic_classes)
  if jax.process_index() == 0:
    with open(args.measured, 'w') as f:
      json.dump(results, f)


def main():
  if '--worker' in sys.argv:
    worker(sys.argv[1:])
    return
  parser = argparse.ArgumentParser()
  parser.add_argument('--layouts', default='1x8,2x4')
  parser.add_argument('--models', default=','.join(MODELS))
  parser.add_argument('--batches', default='32,128', help='global batches')
  parser.add_argument('--steps', type=int, default=10)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  earlier = earlier_cells(args.out)  # read before this run appends to it
  results = provenance.Results(args.out)
  batches = [int(b) for b in args.batches.split(',')]
  root = tempfile.mkdtemp(prefix='mesh_check_')
  table = ['| layout | model | batch | configuration | predicted ms | measured ms | error |',
           '|---|---|---|---|---|---|---|']
  for layout in args.layouts.split(','):
    for model in args.models.split(','):
      rows = check(layout, model, batches, args.steps, root)
      for probe in (r for r in rows if r['kind'] == 'probe'):
        results.write(probe)
      rows = [r for r in rows if r['kind'] == 'candidate']
      for batch in batches:
        group = [r for r in rows if r['global_batch'] == batch]
        for r in group:
          results.write(r)
          table.append(f"| {layout} | {model} | {batch} | {r['configuration']}"
                       f"{' (chosen)' if r['chosen'] else ''} | "
                       f"{1e3 * r['predicted_step_s']:.1f} | {1e3 * r['measured_step_s']:.1f} | "
                       f"{100 * r['error']:+.0f}% |")
        results.write({'kind': 'group', **summary(group), **against_earlier(group, earlier)})
      results.write({'kind': 'floor', **form_floor(rows)})
  print('\n'.join(table), file=sys.stderr)


if __name__ == '__main__':
  main()
