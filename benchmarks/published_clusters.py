"""The planner's cost model against published clusters: predicted step time
and scaling efficiency beside the published efficiency.

    .venv/bin/python benchmarks/published_clusters.py --out=results/published_clusters/results.jsonl

Every input comes from results/published_clusters/inputs.json, each with
its source and whether it is published, derived from published numbers, or
estimated (and how). Only the planner's pure formulas run
(planner/cluster_model.py): nothing is measured here. Where a
publication says its system overlapped communication with backprop, the
communication hides behind the backward pass, the case's `backprop_share`
of T_C (the publication's own timing where it gives one, else the FLOP
split); elsewhere it follows the compute.

The NICs run at line rate with no transport, framework or server-CPU cost,
so each prediction is an upper bound on the scaling efficiency. Where a
publication gives an achieved bandwidth or a same-cluster ablation, a
second prediction comes from it (`second_prediction`, labelled with its
basis); no constant is fitted to a published result.

One record per case and model, then one `score` record: how many
predictions are within MISS_POINTS of the published efficiency (the
difference rounded to 0.1 point first, so that +10.0 is in whatever the
floating-point noise), the mean signed and mean absolute difference, and
the same for a predictor that always answers 100% and for the second
predictions. Records carry their provenance (benchmarks/provenance.py); a
table goes to standard error.
"""

import argparse
import json
import os
import statistics
import sys

import provenance  # benchmarks/provenance.py, beside this script

sys.path.insert(0, provenance.REPO)
# pylint: disable=g-import-not-at-top,wrong-import-position
from core import units
from planner import cluster_model as cm

INPUTS = os.path.join(provenance.REPO, 'results', 'published_clusters', 'inputs.json')
MISS_POINTS = 10  # a prediction further than this from the published one says why
POINTS_DECIMALS = 1  # differences are rounded to 0.1 point before the comparison


def _entry(name: str, model: dict, case: dict, shared: dict):
  """The input `name`: the model's, else the case's, else the shared one;
  an entry is {value, status, source[, how]} or a bare value."""
  for scope in (model, case, shared):
    if name in scope:
      entry = scope[name]
      return entry if isinstance(entry, dict) else {'value': entry, 'status': 'published'}
  return None


def _cluster(value, hosts: int) -> cm.Cluster:
  return cm.Cluster(num_hosts=hosts, devices_per_host=value('devices_per_host'),
                    nic_bandwidth=units.gbps_to_bytes_per_s(value('nic_gbps')),
                    nic_latency_s=value('nic_latency_ms') / 1e3,
                    intra_bandwidth=units.gbps_to_bytes_per_s(value('intra_host_gbps')),
                    intra_latency_s=value('intra_host_latency_ms') / 1e3)


def within(points: float) -> bool:
  """Whether a difference is within MISS_POINTS, once rounded to 0.1 point."""
  return round(abs(points), POINTS_DECIMALS) <= MISS_POINTS


def step_s(value, hosts: int) -> float:
  """The predicted step of `hosts` hosts, as the case's system runs it."""
  strategy, cluster = value('strategy'), _cluster(value, hosts)
  size, compute = value('model_bytes'), value('compute_s')
  # Only an overlapping system needs the backward pass's share.
  share = value('backprop_share') if value('overlap') else 1.0
  kw = dict(overlap=value('overlap'), overlap_share=share, update_s=value('update_s'))
  if strategy == 'ps_after_host_allreduce':
    # The host's devices sum their gradients (a ring over its fabric) and
    # share the result; between hosts, PS with one worker a host.
    inside = cm.allreduce_s(size, cluster.with_hosts(1), 'ring')
    across = cm.Cluster(hosts, 1, cluster.nic_bandwidth, cluster.nic_latency_s,
                        cluster.intra_bandwidth, cluster.intra_latency_s)
    return inside + cm.step_s('ps', compute, size, across, num_shards=value('num_shards'),
                              placement=value('ps_placement'), **kw)
  if strategy == 'ps':
    return cm.step_s('ps', compute, size, cluster, num_shards=value('num_shards'),
                     placement=value('ps_placement'), **kw)
  return cm.step_s(strategy, compute, size, cluster, **kw)


def _efficiency(value, case: dict) -> tuple[float, float, float]:
  """(step s, baseline step s, scaling efficiency) predicted with `value`."""
  step = step_s(value, value('num_hosts'))
  if case['efficiency'] == 'vs_one_host':
    baseline = step_s(value, value('baseline_hosts'))
  else:  # one device alone: its compute
    baseline = value('compute_s')
  return step, baseline, baseline / step


def _published_efficiency(figure: dict, num_devices: int) -> float:
  """A published efficiency, or throughput / (N x one device's)."""
  return figure.get('efficiency') or (
      figure['images_per_sec'] / (num_devices * figure['one_device_images_per_sec']))


def _second(second: dict | None, value, case: dict, num_devices: int) -> float | None:
  """The second prediction's efficiency: the model again with the achieved
  NIC bandwidth, or the same cluster's published figure with the faster
  transport; None where no publication gives one."""
  if second is None:
    return None
  if 'nic_gbps' in second:
    def achieved(name):
      return second['nic_gbps'] if name == 'nic_gbps' else value(name)
    return _efficiency(achieved, case)[2]
  return _published_efficiency(second, num_devices)


def predict(case: dict, model: dict, shared: dict, explanations: dict) -> dict:
  """One record: the inputs used, the prediction and the published figure."""
  def entry(name):
    return _entry(name, model, case, shared)
  def value(name):
    return entry(name)['value']
  hosts, g = value('num_hosts'), value('devices_per_host')
  step, baseline, efficiency = _efficiency(value, case)
  published_efficiency = _published_efficiency(model['published'], hosts * g)
  difference = 100 * (efficiency - published_efficiency)
  second_entry = model.get('second_prediction', case.get('second_prediction'))
  second = _second(second_entry, value, case, hosts * g)
  names = ('strategy', 'overlap', 'num_hosts', 'devices_per_host', 'nic_gbps',
           'nic_latency_ms', 'intra_host_gbps', 'intra_host_latency_ms', 'per_device_batch',
           'model_bytes', 'compute_s')
  if value('overlap'):
    names += ('backprop_share',)
  if value('strategy').startswith('ps'):
    names += ('num_shards', 'ps_placement', 'update_s')
  used = {n: entry(n) for n in names if entry(n) is not None}
  key = f'{case["case"]}/{model["model"]}'
  return {
      'case': case['case'], 'model': model['model'], 'reference': case['reference'],
      'system': case['system'], 'strategy': value('strategy'), 'overlap': value('overlap'),
      'num_hosts': hosts, 'devices_per_host': g, 'nic_gbps': value('nic_gbps'),
      'per_device_batch': value('per_device_batch'), 'model_mb': value('model_bytes') / 1e6,
      'compute_s': value('compute_s'),
      'backprop_share': value('backprop_share') if value('overlap') else None,
      'num_shards': value('num_shards') if 'num_shards' in used else None,
      'efficiency_against': case['efficiency'],
      'predicted_step_s': step, 'baseline_step_s': baseline,
      'predicted_efficiency': efficiency, 'published_efficiency': published_efficiency,
      'difference_points': difference, 'within': within(difference),
      'second_basis': second_entry['basis'] if second_entry else None,
      'second_efficiency': second,
      'second_difference_points': (None if second is None else
                                   100 * (second - published_efficiency)),
      'estimated_inputs': sorted(n for n, e in used.items() if e['status'] == 'estimated'),
      'inputs': {n: e['value'] for n, e in used.items()},
      'why': None if within(difference) else explanations.get(key),
  }


def _stats(points: list[float]) -> dict:
  return {'predictions': len(points), 'within': sum(within(p) for p in points),
          'mean_signed_points': statistics.fmean(points) if points else None,
          'mean_absolute_points': statistics.fmean(map(abs, points)) if points else None}


def score(records: list[dict]) -> dict:
  """The `score` record: each predictor's count within MISS_POINTS (after
  rounding to 0.1 point) and its mean signed and mean absolute difference,
  in points of efficiency: the planner at line rate, a predictor that
  always answers 100%, and the second predictions where there are any."""
  return {
      'summary': 'score', 'within_points': MISS_POINTS,
      'rounded_to_points': 10**-POINTS_DECIMALS,
      'planner': _stats([r['difference_points'] for r in records]),
      'always_100': _stats([100 * (1 - r['published_efficiency']) for r in records]),
      'second': _stats([r['second_difference_points'] for r in records
                        if r['second_difference_points'] is not None]),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--inputs', default=INPUTS, help='the cases, as inputs.json')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  with open(args.inputs) as f:
    data = json.load(f)
  records = [predict(case, model, data['shared'], data['explanations'])
             for case in data['cases'] for model in case['models']]
  summary = score(records)
  records = [results.write(r) for r in records]
  results.write(summary)
  print(f'{"case":<22} {"model":<13} {"step s":>8} {"predicted":>9} {"published":>9} '
        f'{"points":>7} {"second":>7}', file=sys.stderr)
  for r in records:
    second = '' if r['second_efficiency'] is None else f'{r["second_efficiency"]:>7.2f}'
    print(f'{r["case"]:<22} {r["model"]:<13} {r["predicted_step_s"]:>8.3f} '
          f'{r["predicted_efficiency"]:>9.2f} {r["published_efficiency"]:>9.2f} '
          f'{r["difference_points"]:>+7.1f} {second}', file=sys.stderr)
  for name in ('planner', 'always_100', 'second'):
    stats = summary[name]
    if not stats['predictions']:
      continue
    print(f'{name}: {stats["within"]} of {stats["predictions"]} within {MISS_POINTS} '
          f'points; mean {stats["mean_signed_points"]:+.1f}, mean absolute '
          f'{stats["mean_absolute_points"]:.1f}', file=sys.stderr)


if __name__ == '__main__':
  main()
