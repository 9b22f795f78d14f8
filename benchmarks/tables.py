"""The short table of each kind of results, from one run's records.

A kind is the script that wrote the records (speed_ab, step_parts, ...) or
what results/results_index.json names. Each function returns a list of
tables, each (header, rows) of strings: summaries where the script writes
them, the records themselves where they are few.
"""

import statistics

Table = tuple[list[str], list[list[str]]]


def _f(value, spec: str = '') -> str:
  """A number as `spec` formats it (by default 3 significant digits, no
  exponent), '-' where the record has none."""
  if value is None:
    return '-'
  if isinstance(value, str):
    return value
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if spec:
    return format(value, spec)
  magnitude = abs(value)
  if magnitude >= 100:
    return f'{value:,.0f}'
  return format(value, '.1f' if magnitude >= 10 else '.2f' if magnitude >= 1 else '.3g')


def _percent(value) -> str:
  return '-' if value is None else f'{100 * value:.1f}%'


def _mesh(mesh) -> str:
  if not isinstance(mesh, dict):
    return _f(mesh)
  axes = [f'{axis}={size}' for axis, size in mesh.items() if size != 1]
  return ' x '.join(axes) or 'one device'


def _summaries(records) -> list[dict]:
  return [r for r in records if r.get('summary') == 'median']


def speed_ab(records) -> list[Table]:
  header = ['variant', 'rounds', 'images/s', 'step s (median)', 'MFU',
            'peak TFLOP/s', 'compile s']
  rows = [[r['variant'], _f(r['rounds'], 'd'), _f(r.get('images_per_sec')),
           _f(r.get('step_time_median_s')), _percent(r.get('mfu')),
           _f(r.get('peak_tflops')), _f(r.get('compile_s'), '.1f')]
          for r in _summaries(records)]
  return [(header, rows)]


def bench(records) -> list[Table]:
  header = ['model', 'image size', 'batch', 'dtype', 'mesh', 'images/s',
            'step s (median)', 'MFU', 'compile s']
  rows = [[r.get('model', '-'), _f(r.get('image_size'), 'd'), _f(r.get('batch_size'), 'd'),
           r.get('dtype', '-'), _mesh(r.get('mesh')), _f(r.get('images_per_sec')),
           _f(r.get('step_time_median_s')), _percent(r.get('mfu')),
           _f(r.get('compile_s'), '.1f')] for r in records]
  return [(header, rows)]


def collectives(records) -> list[Table]:
  tables = [(['operation', 'devices', 'MB per device', 'median s'],
             [[r['operation'], _f(r['devices'], 'd'), _f(r['megabytes_per_device']),
               _f(r['median_s'])] for r in records if 'operation' in r])]
  whole = [r['whole_process'] for r in records if 'whole_process' in r]
  if whole:
    tables.append((['whole process: wall s', 'user s', 'system s', 'minor page faults'],
                   [[_f(w['wall_s']), _f(w['user_s']), _f(w['system_s']),
                     f"{w['minor_page_faults']:,}"] for w in whole]))
  return tables


def link_pacing(records) -> list[Table]:
  return [(['Gbit/s', 'MB', 'X/B + latency s', 'median s', 'min s', 'max s', 'error %'],
           [[_f(r['bandwidth_gbps'], 'g'), _f(r['megabytes'], 'g'), _f(r['expected_s']),
             _f(r['median_s']), _f(r['min_s']), _f(r['max_s']),
             _f(r['error_percent'], '+.1f')] for r in records])]


def conv_forms(records) -> list[Table]:
  parts = any('xla_forward_gflops_per_s' in r for r in records)
  header = ['input', 'kernel', 'stride', 'XLA GFLOP/s', 'patches GFLOP/s',
            'patches speed-up', 'by_shape picks']
  if parts:
    header += ['XLA forward', 'XLA input gradient', 'XLA kernel gradient']
  rows = []
  for r in records:
    row = ['x'.join(map(str, r['input'])), 'x'.join(map(str, r['kernel'])),
           _f(r['stride'], 'd'), _f(r['xla_gflops_per_s']), _f(r['patches_gflops_per_s']),
           _f(r['patches_speedup']), r['by_shape_picks']]
    if parts:
      row += [_f(r.get(f'xla_{p}_gflops_per_s'))
              for p in ('forward', 'input_grad', 'kernel_grad')]
    rows.append(row)
  return [(header, rows)]


def _link(record) -> str:
  if record['engine'] == 'spmd':
    return 'collectives in memory'
  bandwidth = record['bandwidth_gbps']
  return 'unlimited' if bandwidth == 0 else f'{bandwidth:g} Gbit/s'


_ENGINE_ORDER = {'spmd': 0, 'allreduce': 1, 'ps': 2}
_ENGINE_NAMES = {'spmd': 'SPMD', 'allreduce': 'all-reduce (ring)', 'ps': 'PS'}


def engine_contrast(records) -> list[Table]:
  """images/s with the worker counts across, one row per engine, link and N_ps."""
  workers = sorted({r['num_workers'] for r in records})
  cells = {}
  for r in records:
    key = (r['model'], r['bandwidth_gbps'], _ENGINE_ORDER[r['engine']], r['num_shards'])
    cells.setdefault(key, {'record': r})[r['num_workers']] = r['images_per_sec']
  header = ['model (global batch)', 'engine', 'link', 'N_ps'] + [f'N_w={n}' for n in workers]
  rows = []
  for key in sorted(cells):
    row = cells[key]
    r = row['record']
    rows.append([f"{r['model']} ({r['batch_size']})", _ENGINE_NAMES[r['engine']], _link(r),
                 _f(r['num_shards'], 'd') if r['engine'] == 'ps' else '-'] +
                [_f(row.get(n), '.1f') for n in workers])
  return [(header, rows)]


def flax_side_by_side(records) -> list[Table]:
  header = ['setting', 'rounds', 'this project images/s', 'Flax example images/s',
            'ratio', 'this project MFU', 'Flax example MFU']
  rows = [[r['summary'], _f(r['rounds'], 'd'), _f(r['this_project_images_per_sec']),
           _f(r['flax_example_images_per_sec']), _f(r['ratio']),
           _percent(r['this_project_mfu']), _percent(r['flax_example_mfu'])]
          for r in records if 'summary' in r]
  return [(header, rows)]


def step_parts(records) -> list[Table]:
  header = ['model', 'devices', 'variant', 'rounds', 'step s (median)', 'images/s',
            'CPU s per step']
  rows = [[r['model'], _f(r['devices'], 'd'), r['variant'], _f(r['rounds'], 'd'),
           _f(r['step_s']), _f(r['images_per_s']), _f(r['cpu_s_per_step'])]
          for r in _summaries(records)]
  return [(header, rows)]


def memory_table(records) -> list[Table]:
  """The compiles; for a recipe sweep, per batch per device, then its fits."""
  compiles = [r for r in records if 'fit' not in r]
  if not any('per_device_batch' in r for r in compiles):
    header = ['model', 'mesh', 'batch', 'params + opt state per device (GiB)',
              'x (replicated / 8)', 'temporaries (GiB)', 'peak (GiB)']
    rows = [[r['model'], r['mesh_name'], _f(r['batch_size'], 'd'),
             _f(r['state_per_device_gib'], '.3f'), _f(r['state_vs_replicated_over_8'], '.3f'),
             _f(r['temporaries_gib'], '.3f'), _f(r['peak_gib'], '.3f')] for r in compiles]
    return [(header, rows)]
  header = ['model', 'mesh', 'dtype', 'batch per device', 'params (GiB)',
            'opt state (GiB)', 'temporaries (GiB)', 'peak (GiB)', 'compile s']
  rows = [[r['model'], r['mesh_name'], r['dtype'], _f(r['per_device_batch'], 'd'),
           _f(r['params_gib'], '.3f'), _f(r['opt_state_gib'], '.3f'),
           _f(r['temporaries_gib'], '.3f'), _f(r['peak_gib'], '.3f'),
           _f(r['compile_s'], '.1f')] for r in compiles]
  fit_header = ['model', 'peak (GiB) = a + b x batch per device', 'fit batches',
                'largest residual (GiB)', 'device GB', 'pool x (1 - margin)',
                'budget (GiB)', 'largest batch per device', 'its peak (GiB)']
  fit_rows = [[r['model'], f"{r['peak_intercept_gib']:.3f} + "
               f"{r['peak_slope_gib_per_example']:.4f} x",
               ', '.join(map(str, r['fit_batches'])), _f(r['fit_max_residual_gib'], '.3f'),
               _f(r['capacity_gb'], 'g'),
               f"{r.get('mem_fraction', r.get('jax_mem_fraction')):g} x (1 - {r['margin']:g})",
               _f(r['budget_gib'], '.2f'),
               _f(r['largest_per_device_batch'], 'd'), _f(r['confirmed_peak_gib'], '.3f')]
              for r in records if 'fit' in r]
  return [(header, rows), (fit_header, fit_rows)]


def multiprocess(records) -> list[Table]:
  header = ['model', 'setup', 'steps', 'images/s', 'step ms']
  rows = [[r['model'], r['setup'], _f(r['steps'], 'd'), _f(r['images_per_sec']),
           _f(1e3 * r['step_time_s'], '.1f')] for r in records]
  return [(header, rows)]


def probe_check(records) -> list[Table]:
  """Every cell; with repeats (a `repeat` in the records), each cell's
  spread over them: (max - min) / median of the predicted and of the
  measured steps."""
  repeated = any('repeat' in r for r in records)
  header = (['repeat'] if repeated else []) + [
      'processes', 'model', 'batch per device', 'predicted ms', 'measured ms',
      'error', 'measured intervals ms']
  rows = [([_f(r['repeat'], 'd')] if repeated else []) + [
      _f(r['processes'], 'd'), r['model'], _f(r['per_device_batch'], 'd'),
      _f(1e3 * r['predicted_step_s'], '.1f'), _f(1e3 * r['measured_step_s'], '.1f'),
      f"{100 * r['error']:+.1f}%",
      ', '.join(f'{1e3 * t:.0f}' for t in r['measured_step_s_intervals'])]
      for r in records]
  if not repeated:
    return [(header, rows)]
  cells = {}
  for r in records:
    cells.setdefault((r['processes'], r['model'], r['per_device_batch']), []).append(r)
  spread = lambda v: (max(v) - min(v)) / statistics.median(v)
  spread_header = ['processes', 'model', 'batch per device', 'repeats', 'predicted ms',
                   'predicted spread', 'measured ms', 'measured spread', 'errors']
  spread_rows = []
  for (processes, model, batch), rs in cells.items():
    predicted = [1e3 * r['predicted_step_s'] for r in rs]
    measured = [1e3 * r['measured_step_s'] for r in rs]
    spread_rows.append([
        _f(processes, 'd'), model, _f(batch, 'd'), _f(len(rs), 'd'),
        f'{min(predicted):.1f} to {max(predicted):.1f}', _percent(spread(predicted)),
        f'{min(measured):.1f} to {max(measured):.1f}', _percent(spread(measured)),
        ', '.join(f"{100 * r['error']:+.1f}%" for r in rs)])
  return [(header, rows), (spread_header, spread_rows)]


def mesh_check(records) -> list[Table]:
  """Per (layout, model), its batches side by side ("a / b"): the summary,
  with the fastest of the three configurations the plan answers (what
  plan.time_steps would settle on), and, where the run has them, the
  floor of the costing's form and how far the probe after the cells moved
  its timed compute (every cell's figures are in the data). One table: the
  tables of a file's runs merge by position."""
  header = ['layout', 'model', 'batch', 'candidates', 'MAPE', 'worst', 'chosen',
            'measured fastest', 'chosen over fastest', 'Spearman', 'memory equal',
            'step spread', 'measured moved', 'predicted moved',
            'measured fastest, predicted rank', 'fastest of the three answered, over it',
            'MAPE, probe after', 'probe after moved', 'floor MAPE', 'floor worst',
            'probe compute moved']
  floors = {(r['layout'], r['model']): r for r in records if r['kind'] == 'floor'}
  moved = {(r['layout'], r['model']): r.get('compute_moved') for r in records
           if r['kind'] == 'probe' and r.get('when') == 'after the cells'}
  by_pair = {}
  for r in (r for r in records if r['kind'] == 'group'):
    members = [c for c in records if c['kind'] == 'candidate' and
               (c['layout'], c['model'], c['global_batch']) ==
               (r['layout'], r['model'], r['global_batch'])]
    # What plan.time_steps would answer: the measured fastest of the three
    # the plan answers (the three predicted fastest).
    by_prediction = sorted(members, key=lambda c: c['predicted_step_s'])
    fastest = min(members, key=lambda c: c['measured_step_s'])
    timed = min(by_prediction[:3], key=lambda c: c['measured_step_s'])
    by_pair.setdefault((r['layout'], r['model']), []).append([
        _f(r['global_batch'], 'd'), _f(r['candidates'], 'd'),
        _percent(r['mape']), _percent(r['worst_error']), r['chosen'],
        r['measured_fastest'], _percent(r['chosen_over_fastest']),
        _f(r['spearman'], '.2f'), _f(r['memory_equal']),
        _percent(r.get('step_spread')), _percent(r.get('repeat_measured_difference')),
        _percent(r.get('repeat_predicted_difference')),
        _f(by_prediction.index(fastest) + 1, 'd'),
        f"{timed['configuration']}, "
        f"{_percent(timed['measured_step_s'] / fastest['measured_step_s'] - 1)}",
        _percent(r.get('mape_probe_after')), _percent(r.get('probe_after_moved'))])
  rows = []
  for (layout, model), batches in by_pair.items():
    floor = floors.get((layout, model), {})
    rows.append([layout, model] + [' / '.join(column) for column in zip(*batches)] + [
        _percent(floor.get('mape')), _percent(floor.get('worst_error')),
        _percent(moved.get((layout, model)))])
  return [(header, rows)]


def large_vit_plans(records) -> list[Table]:
  """Per (model, devices, device): the mesh plan's answer and its terms."""
  header = ['model', 'devices', 'device GB', 'budget GiB', 'global batch', 'fastest that fits',
            'step ms', 'compute ms', 'comm. ms', 'peak GiB', 'fitting / not climbed',
            'compiles']
  rows = []
  for r in records:
    best = r['best'] or {}
    rows.append([r['model'], _f(r['devices'], 'd'), _f(r['device_gb'], 'g'),
                 _f(r['budget_gib'], '.2f'), _f(r['global_batch'], 'd'),
                 best.get('name', 'nothing fits'),
                 _f(1e3 * best['step_s'], '.1f') if best else '',
                 _f(1e3 * best['compute_s'], '.1f') if best else '',
                 _f(1e3 * best['communication_s'], '.1f') if best else '',
                 _f((best['peak'] if best else r['smallest_miss_peak']) / 2**30, '.2f'),
                 f"{r['fitting']} / {r.get('not_climbed', 0)}",
                 f"{r['compiles']['compiled']} + {r['compiles']['reused']} reused"])
  return [(header, rows)]


def array_cost(records) -> list[Table]:
  header = ['layout', 'hidden', 'arrays', 'gradient bytes', 'extra ms', 'predicted ms',
            'error']
  rows = [[r['layout'], _f(r['hidden'], 'd'), _f(r['operands'], 'd'),
           _f(r['gradient_bytes'], 'd'), _f(1e3 * r['extra_s'], '.3f'),
           _f(1e3 * r['predicted_extra_s'], '.3f'), f"{100 * r['error']:+.1f}%"]
          for r in records if r['kind'] == 'step']
  fits_header = ['layout', 'hidden', 'mean array bytes', 'fixed ms', 'per array ms']
  fits = [[r['layout'], _f(r['hidden'], 'd'), _f(r['mean_array_bytes'], '.0f'),
           _f(1e3 * r['fixed_s'], '.3f'), _f(1e3 * r['per_operand_s'], '.3f')]
          for r in records if r['kind'] == 'fit']
  return [(header, rows), (fits_header, fits)]


def collective_overlap(records) -> list[Table]:
  header = ['layout', 'level', 'devices', 'all-reduce us', 'chunk us', 'dependent us',
            'independent us', 'paid (dependent)', 'paid (independent)']
  rows = [[r['layout'], r['level'], _f(r['group_size'], 'd'),
           _f(1e6 * r['collective_s'], '.0f'), _f(1e6 * r['compute_s'], '.0f'),
           _f(1e6 * r['dependent_s'], '.0f'), _f(1e6 * r['independent_s'], '.0f'),
           _f(r['dependent_paid_share'], '.2f'), _f(r['independent_paid_share'], '.2f')]
          for r in records]
  return [(header, rows)]


def collective_ticks(records) -> list[Table]:
  header = ['layout', 'devices', 'calls', 'median ms', 'p10 ms', 'p90 ms', 'kernel Hz',
            'share on a tick', 'calls per 0.5 ms bin']
  rows = [[r['layout'], _f(r['devices'], 'd'), _f(r['calls'], 'd'),
           _f(1e3 * r['median_s'], '.3f'), _f(1e3 * r['p10_s'], '.3f'),
           _f(1e3 * r['p90_s'], '.3f'), _f(r['kernel_hz'], 'd'),
           _f(r['share_on_ticks'], '.2f'), ' '.join(str(c) for c in r['histogram'])]
          for r in records]
  return [(header, rows)]


def restore_memory(records) -> list[Table]:
  header = ['case', 'model', 'mesh', 'code', 'peak RSS (GiB)', 'RSS before (GiB)',
            'restore s', 'optimiser state read']
  rows = []
  for r in records:
    peak = r.get('peak_rss_gib', r.get('peak_rss_seen_gib'))
    rows.append([r['case'], r['model'], r['mesh'], r['code'],
                 _f(peak, '.2f') if 'failed' not in r else f"failed ({r['failed']})",
                 _f(r.get('rss_before_gib'), '.2f'), _f(r.get('restore_s'), '.1f'),
                 _f(r.get('opt_state_restored'))])
  return [(header, rows)]


def quickstart_run(records) -> list[Table]:
  header = ['recipe', 'wall s', 'final step', 'final top-1', '--mode=eval top-1', 'goodput',
            'largest parts of the run']
  rows = []
  for r in records:
    run = r.get('goodput')
    parts = '' if run is None else ', '.join(
        f'{name} {_percent(s / run["wall_s"])}' for name, s in
        sorted(run['parts'].items(), key=lambda item: -item[1])[:3])
    rows.append([r['recipe'], _f(r['wall_s'], '.1f'), _f(r['final_step'], 'd'),
                 _percent(r['final_top1']), _percent(r['eval_mode_line']['accuracy']),
                 _percent(run['goodput']) if run else '', parts])
  return [(header, rows)]


def goodput_cost(records) -> list[Table]:
  header = ['recipe', 'ledger per step us', 'median step s', 'share of a step']
  rows = [[r['recipe'], _f(r['after_step_us'], '.2f'), _f(r['step_time_s'], '.4f'),
           f"{100 * r['share_of_step']:.4f}%"] for r in records]
  return [(header, rows)]


def metrics_writer_import(records) -> list[Table]:
  header = ['writer', 'import and one scalar s', 'bare interpreter s', 'rounds']
  rows = [[r['writer'], _f(r['start_up_s'], '.3f'), _f(r['interpreter_s'], '.3f'),
           _f(r['rounds'], 'd')] for r in records]
  return [(header, rows)]


def plan_example(records) -> list[Table]:
  header = ['model', 'image px', 'devices', 'S MB', 'per-device batch', 'T_C ms']
  rows = [[r['plan']['model'], _f(r['plan']['image_size'], 'd'),
           _f(r['plan']['cluster']['num_workers'], 'd'), _f(r['plan']['model_bytes'] / 1e6, '.1f'),
           _f(r['plan']['recommended']['per_device_batch'], 'd'),
           _f(r['plan']['cluster']['compute_s'] * 1e3, '.2f')] for r in records]
  return [(header, rows)]


def study(records) -> list[Table]:
  """The predicted step time's error, per model and link, then over all cells."""
  groups = {}
  for r in records:
    groups.setdefault((r['cell']['model'], r['cell']['bandwidth_gbps']), []).append(r)
  groups[('all', None)] = records
  header = ['model', 'link Gbit/s', 'cells', 'MAPE', 'worst cell error']
  rows = []
  for (model, bandwidth), rs in groups.items():
    errors = [100 * r['error'] for r in rs]
    rows.append([model, _f(bandwidth, 'g'), _f(len(rs), 'd'),
                 f'{statistics.mean(abs(e) for e in errors):.1f}%',
                 f'{max(errors, key=abs):+.1f}%'])
  return [(header, rows)]


def _jpeg_decoding(record) -> str:
  """How an input_pipeline record's JPEGs were decoded, in words
  (jpeg_fast_upsampling: the experiment of docs/performance.md's "What was
  tried and did not help")."""
  on = [name for key, name in (('jpeg_scaled_decode', 'scaled'),
                               ('jpeg_fast_upsampling', 'fast upsampling'))
        if record.get(key)]
  return ' + '.join(on) or 'exact'


def input_pipeline(records) -> list[Table]:
  header = ['transform', 'augment', 'JPEG decoding', 'file format', 'image size', 'batch',
            'images/s (median)', 'images/s (best)', 'CPU ms per image (median)',
            'vs exact: mean abs diff', 'vs exact: PSNR dB', 'mean file KB']
  rows = [[r['transform'], _f(r.get('augment')), _jpeg_decoding(r), _f(r.get('file_format')),
           _f(r['image_size'], 'd'), _f(r['batch_size'], 'd'),
           _f(r['images_per_sec_median'], 'd'), _f(r['images_per_sec_best'], 'd'),
           _f(r['cpu_ms_per_image_median'], '.3f'), _f(r.get('vs_exact_mean_abs_diff'), '.3f'),
           _f(r.get('vs_exact_psnr_db'), '.2f'), _f(r.get('mean_file_kb'))]
          for r in records]
  return [(header, rows)]


def make_imagenet_like(records) -> list[Table]:
  header = ['file format', 'train', 'eval', 'size', 'mean file KB', 'min KB', 'max KB',
            'seconds']
  rows = [[r['file_format'], _f(r['num_train'], 'd'), _f(r['num_eval'], 'd'),
           f"{r['width']}x{r['height']}", _f(r['mean_file_kb']), _f(r['min_file_kb']),
           _f(r['max_file_kb']), _f(r['seconds'], '.1f')] for r in records]
  return [(header, rows)]


def published_clusters(records) -> list[Table]:
  """The planner's predicted scaling efficiency (at line rate: an upper
  bound) beside the published one, each case's second prediction where a
  publication gives one, then the score of each predictor."""
  header = ['case', 'model', 'hosts x devices, NIC', 'strategy', 'backprop share',
            'predicted step s', 'predicted efficiency (line rate: upper bound)',
            'published efficiency', 'points', 'second prediction', 'its points',
            'estimated inputs', 'why it misses']
  cases = [r for r in records if 'case' in r]
  rows = [[r['case'], r['model'],
           f"{r['num_hosts']} x {r['devices_per_host']}, {r['nic_gbps']:g} Gbit/s",
           r['strategy'] + (' (overlap)' if r['overlap'] else '') +
           (f", N_ps {r['num_shards']}" if r.get('num_shards') else ''),
           _f(r.get('backprop_share'), '.2f'),
           _f(r['predicted_step_s'], '.3f'), _percent(r['predicted_efficiency']),
           _percent(r['published_efficiency']), _f(r['difference_points'], '+.1f'),
           (f"{_percent(r['second_efficiency'])} ({r['second_basis']})"
            if r.get('second_efficiency') is not None else '-'),
           _f(r.get('second_difference_points'), '+.1f'),
           ', '.join(r['estimated_inputs']) or '-', r['why'] or '-'] for r in cases]
  names = {'planner': 'the planner at line rate', 'always_100': 'always 100%',
           'second': 'second predictions'}
  score_header = ['predictor', 'predictions', 'within 10 points (rounded to 0.1)',
                  'mean signed points', 'mean absolute points']
  score_rows = [[names[name], _f(s[name]['predictions'], 'd'), _f(s[name]['within'], 'd'),
                 _f(s[name]['mean_signed_points'], '+.1f'),
                 _f(s[name]['mean_absolute_points'], '.1f')]
                for s in records if s.get('summary') == 'score' for name in names]
  return [(header, rows), (score_header, score_rows)]


def test_suite(records) -> list[Table]:
  header = ['pytest arguments', 'exit code', 'passed', 'failed', 'skipped', 'errors',
            'seconds']
  rows = [[' '.join(r['pytest_args']), _f(r['returncode'], 'd'), _f(r['passed'], 'd'),
           _f(r['failed'], 'd'), _f(r['skipped'], 'd'), _f(r['errors'], 'd'),
           _f(r['seconds'], '.1f')] for r in records]
  return [(header, rows)]


TABLES = {f.__name__: f for f in (
    speed_ab, bench, collectives, conv_forms, engine_contrast, flax_side_by_side,
    step_parts, memory_table, multiprocess, restore_memory, study,
    input_pipeline, make_imagenet_like, link_pacing, published_clusters, probe_check,
    test_suite, quickstart_run, plan_example, goodput_cost,
    metrics_writer_import, mesh_check, array_cost, collective_overlap, collective_ticks,
    large_vit_plans)}
