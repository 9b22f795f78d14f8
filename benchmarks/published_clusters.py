"""The planner's cost model against published clusters: predicted step time
and scaling efficiency beside the published efficiency.

    .venv/bin/python benchmarks/published_clusters.py --out=benchmarks/published_clusters/results.jsonl

Every input comes from benchmarks/published_clusters/inputs.json, each with
its source and whether it is published, derived from published numbers, or
estimated (and how). Only the planner's pure formulas run
(planner/cluster_model.py): nothing is measured here. Where a
publication says its system overlapped communication with backprop, the
communication hides behind the backward pass (cluster_model.BACKPROP_SHARE
of T_C); elsewhere it follows the compute. One record per case and model,
with its provenance (benchmarks/provenance.py); a table on standard error.
"""

import argparse
import json
import os
import sys

import provenance  # benchmarks/provenance.py, beside this script

sys.path.insert(0, provenance.REPO)
# pylint: disable=g-import-not-at-top,wrong-import-position
from core import units
from planner import cluster_model as cm

INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'published_clusters',
                      'inputs.json')
MISS_POINTS = 10  # a prediction further than this from the published one says why


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


def step_s(value, hosts: int) -> float:
  """The predicted step of `hosts` hosts, as the case's system runs it."""
  strategy, cluster = value('strategy'), _cluster(value, hosts)
  size, compute = value('model_bytes'), value('compute_s')
  kw = dict(overlap=value('overlap'), overlap_share=cm.BACKPROP_SHARE,
            update_s=value('update_s'))
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


def predict(case: dict, model: dict, shared: dict, explanations: dict) -> dict:
  """One record: the inputs used, the prediction and the published figure."""
  def entry(name):
    return _entry(name, model, case, shared)
  def value(name):
    return entry(name)['value']
  hosts, g = value('num_hosts'), value('devices_per_host')
  step = step_s(value, hosts)
  if case['efficiency'] == 'vs_one_host':
    baseline = step_s(value, value('baseline_hosts'))
  else:  # one device alone: its compute
    baseline = value('compute_s')
  efficiency = baseline / step
  published = model['published']
  published_efficiency = published.get('efficiency') or (
      published['images_per_sec'] / (hosts * g * published['one_device_images_per_sec']))
  difference = 100 * (efficiency - published_efficiency)
  names = ('strategy', 'overlap', 'num_hosts', 'devices_per_host', 'nic_gbps',
           'nic_latency_ms', 'intra_host_gbps', 'intra_host_latency_ms', 'per_device_batch',
           'model_bytes', 'compute_s')
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
      'num_shards': value('num_shards') if 'num_shards' in used else None,
      'efficiency_against': case['efficiency'],
      'predicted_step_s': step, 'baseline_step_s': baseline,
      'predicted_efficiency': efficiency, 'published_efficiency': published_efficiency,
      'difference_points': difference,
      'estimated_inputs': sorted(n for n, e in used.items() if e['status'] == 'estimated'),
      'inputs': {n: e['value'] for n, e in used.items()},
      'why': explanations.get(key) if abs(difference) > MISS_POINTS else None,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--inputs', default=INPUTS, help='the cases, as inputs.json')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  with open(args.inputs) as f:
    data = json.load(f)
  records = [results.write(predict(case, model, data['shared'], data['explanations']))
             for case in data['cases'] for model in case['models']]
  print(f'{"case":<22} {"model":<13} {"step s":>8} {"predicted":>9} {"published":>9} '
        f'{"points":>7}', file=sys.stderr)
  for r in records:
    print(f'{r["case"]:<22} {r["model"]:<13} {r["predicted_step_s"]:>8.3f} '
          f'{r["predicted_efficiency"]:>9.2f} {r["published_efficiency"]:>9.2f} '
          f'{r["difference_points"]:>+7.1f}', file=sys.stderr)


if __name__ == '__main__':
  main()
