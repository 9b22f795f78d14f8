"""--mode=plan: measure here, then recommend and predict for a cluster.

On the devices at hand, for the configured model: T_C(b) for a sweep of
per-worker mini-batches (up to what fits), the model's bytes S, the
host<->device copy speed and the shards' update time. Then, for the cluster
in `plan.*` (workers, link bandwidth and latency, and a stated T_C or a
device peak if given): the mini-batch, the number of PS shards, the most workers that
still scale, and step times for SPMD ring all-reduce and for PS, each with
and without overlap. Writes plan.json and PNG plots; prints a table.

The cluster's predictions leave out this host's copies between emulated
devices and host memory (measured and reported as host_copies; the study
adds them, since it predicts the emulation on this host).
"""

import json
import math
import os

from absl import logging
import jax

from configs.errors import UsageError
from trainer import validation
from trainer.validation import parse_list
from trainer import experiment
from trainer import workdir_lock
from trainer.planner import formulas
from trainer.planner import measure

PLAN_FILE = 'plan.json'


def _powers_of_two_to(limit: int) -> list[int]:
  return [2**i for i in range(int(math.log2(max(limit, 1))) + 1)]


def run_plan(config, workdir: str) -> dict:
  """Measures here, then writes plan.json and its plots; returns the plan."""
  with workdir_lock.hold(workdir, 'plan', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    return _measure_and_plan(config, workdir)


def _measure_and_plan(config, workdir: str) -> dict:
  plan = config.plan  # values checked by trainer/validation.py
  batches = parse_list('plan.per_worker_batch_sizes', plan.per_worker_batch_sizes)
  local_workers = validation.num_emulated_workers(config, jax.device_count())
  if local_workers > jax.device_count():
    raise UsageError(f'network.num_workers={local_workers}: the sweep runs that many '
                     f'workers here, but {jax.device_count()} devices are present')
  cluster_workers = plan.num_workers or local_workers
  # Speed is measured on synthetic data: no input pipeline in the way.
  config = config.copy_and_resolve_references()
  config.data.source = 'synthetic'
  config.data.num_synthetic_examples = max(batches) * local_workers
  exp = experiment.build_experiment(config, workdir)

  # --- Measure, here.
  points = measure.compute_sweep(exp, local_workers, batches, plan.repeats,
                                 measure.capacity(exp))
  if not points:
    raise UsageError(f'plan.per_worker_batch_sizes={plan.per_worker_batch_sizes!r}: not even the '
                     f'smallest mini-batch fits the device memory')
  throughput = {p.per_worker_batch: p.images_per_sec for p in points}
  batch = formulas.choose_batch_size(throughput)
  chosen = next(p for p in points if p.per_worker_batch == batch)
  size = measure.model_bytes(exp)
  logging.info('Plan: measuring the host copies and the shards\' update time')
  host_copies = measure.host_copies_s(exp, plan.repeats)
  if plan.compute_s:
    compute, compute_source = plan.compute_s, 'stated'
  elif plan.device_tflops:
    if chosen.flops <= 0:
      raise UsageError(f'plan.device_tflops: XLA reports no FLOPs for '
                       f'{config.model.name} here; state plan.compute_s instead')
    compute = formulas.compute_from_peak_s(chosen.flops, plan.device_tflops * 1e12,
                                           plan.device_utilization)
    compute_source = (f'{chosen.flops / 1e9:.2f} GFLOP at {plan.device_tflops:g} '
                      f'TFLOP/s x {plan.device_utilization:g}')
  else:
    compute, compute_source = chosen.compute_s, 'measured'
  update = measure.update_s(exp, min(local_workers, cluster_workers), 1, plan.repeats)

  # --- Recommend and predict, for the cluster.
  bandwidth = measure.gbps_to_bytes_per_s(plan.link_bandwidth_gbps)
  latency = plan.link_latency_ms / 1e3
  shards = formulas.min_ps_shards(size, bandwidth, cluster_workers, compute)
  link_limited = formulas.link_bound(size, bandwidth, compute)
  configured_shards = config.ps.num_shards
  max_workers = formulas.max_scaling_workers(size, bandwidth, configured_shards, compute)

  def predictions(n_w: int, n_ps: int) -> dict:
    kw = dict(latency_s=latency, update_s=update / max(1, n_ps))
    return {
        'num_workers': n_w, 'num_shards': n_ps,
        'ps_step_s': formulas.ps_step_s(compute, size, bandwidth, n_w, n_ps, **kw),
        'ps_overlap_step_s': formulas.ps_step_s(compute, size, bandwidth, n_w, n_ps,
                                                overlap=True, **kw),
        'allreduce_step_s': formulas.spmd_step_s(compute, size, bandwidth, n_w,
                                                 latency_s=latency),
        'allreduce_overlap_step_s': formulas.spmd_step_s(
            compute, size, bandwidth, n_w, latency_s=latency, overlap=True),
    }
  by_shards = [predictions(cluster_workers, n)
               for n in _powers_of_two_to(max(2 * shards, 2 * cluster_workers))]
  by_workers = [predictions(n, configured_shards)
                for n in _powers_of_two_to(max(2 * cluster_workers, 2))]
  for rows in (by_shards, by_workers):
    for r in rows:
      r['ps_images_per_sec'] = r['num_workers'] * batch / r['ps_step_s']
      r['allreduce_images_per_sec'] = r['num_workers'] * batch / r['allreduce_step_s']

  result = {
      'model': config.model.name, 'image_size': config.data.image_size,
      'measured_on': {'devices': jax.device_count(), 'platform': jax.devices()[0].platform,
                      'workers': local_workers},
      'model_bytes': size,
      'compute_sweep': [vars(p) for p in points],
      'host_copies': host_copies,
      'update_s': update,
      'cluster': {'num_workers': cluster_workers, 'bandwidth_gbps': plan.link_bandwidth_gbps,
                  'latency_ms': plan.link_latency_ms,
                  'compute_s': compute, 'compute_s_source': compute_source},
      'recommended': {
          'per_worker_batch': batch,
          'global_batch': batch * cluster_workers,
          'num_shards': shards,
          'max_workers_that_scale': (None if math.isinf(max_workers) else max_workers),
          'for_num_shards': configured_shards,
          # One worker's traffic alone outlasts T_C: a faster link, not more
          # shards, is what would let the job scale.
          'link_bound': link_limited,
          'bandwidth_to_hide_gbps': formulas.bandwidth_to_hide(size, compute) * 8 / 1e9,
      },
      'predicted_by_shards': by_shards,
      'predicted_by_workers': by_workers,
  }
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, PLAN_FILE), 'w') as f:
    json.dump(result, f, indent=1)
  _plot(result, workdir)
  print(_table(result), flush=True)
  logging.info('Wrote %s', os.path.join(workdir, PLAN_FILE))
  return result


def _table(result: dict) -> str:
  rec, cluster = result['recommended'], result['cluster']
  lines = [
      f'{result["model"]} at {result["image_size"]} px: S = '
      f'{result["model_bytes"] / 1e6:.1f} MB; T_C = {cluster["compute_s"] * 1e3:.1f} ms '
      f'at {rec["per_worker_batch"]} per worker ({cluster["compute_s_source"]})',
      f'mini-batch: {rec["per_worker_batch"]} per worker (global '
      f'{rec["global_batch"]}), the smallest within 5% of the best throughput',
      f'PS shards for {cluster["num_workers"]} workers on {cluster["bandwidth_gbps"]:g} '
      f'Gbit/s: {rec["num_shards"]}',
      f'most workers that still scale with {rec["for_num_shards"]} shards: '
      f'{rec["max_workers_that_scale"]}',
      *([f'the link, not the number of shards, limits this job: one worker\'s '
         f'{result["model_bytes"] / 1e6:.1f} MB take longer than T_C on '
         f'{cluster["bandwidth_gbps"]:g} Gbit/s; {rec["bandwidth_to_hide_gbps"]:.3g} Gbit/s '
         'or more would let it scale'] if rec['link_bound'] else []),
      '', f'{"N_w":>5} {"N_ps":>5} {"PS s":>9} {"PS+ovl s":>9} {"ring s":>9} {"ring+ovl s":>10}']
  for r in result['predicted_by_shards'] + result['predicted_by_workers']:
    lines.append(f'{r["num_workers"]:>5} {r["num_shards"]:>5} {r["ps_step_s"]:>9.4f} '
                 f'{r["ps_overlap_step_s"]:>9.4f} {r["allreduce_step_s"]:>9.4f} '
                 f'{r["allreduce_overlap_step_s"]:>10.4f}')
  return '\n'.join(lines)


def _plot(result: dict, workdir: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  sweep = result['compute_sweep']
  axes[0].plot([p['per_worker_batch'] for p in sweep],
               [p['images_per_sec'] for p in sweep], marker='o')
  axes[0].axvline(result['recommended']['per_worker_batch'], color='grey', ls='--')
  axes[0].set(xscale='log', xlabel='per-worker batch', ylabel='images/s (measured)',
              title='throughput vs mini-batch')
  for ax, rows, x, title in ((axes[1], result['predicted_by_shards'], 'num_shards',
                              'predicted step time vs PS shards'),
                             (axes[2], result['predicted_by_workers'], 'num_workers',
                              'predicted step time vs workers')):
    for key, label in (('ps_step_s', 'PS'), ('ps_overlap_step_s', 'PS, overlap'),
                       ('allreduce_step_s', 'ring all-reduce'),
                       ('allreduce_overlap_step_s', 'ring all-reduce, overlap')):
      ax.plot([r[x] for r in rows], [r[key] for r in rows], marker='o', label=label)
    ax.set(xscale='log', xlabel=x.replace('_', ' '), ylabel='step time (s)', title=title)
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, 'plan.png'), dpi=100)
  plt.close(fig)
