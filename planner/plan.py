"""--mode=plan: measure here, then recommend and predict for a cluster.

The cluster (`plan.*`): plan.num_workers devices, plan.devices_per_host to
a host, the hosts' NIC (plan.link_bandwidth_gbps, plan.link_latency_ms),
the link inside a host (plan.intra_host_gbps, plan.intra_host_latency_ms),
where PS shards live (plan.ps_placement), the all-reduce algorithms to
compare, and the cores a host decodes its input with (plan.host_cores at
plan.host_cpu_ms_per_image; 0 cores: not counted). Its compute time T_C(b) at each per-device batch b is measured
here, or comes from the devices' peak (XLA's FLOPs of the batch's program,
compiled here, at plan.device_tflops x plan.device_utilization), or from a
stated T_C (plan.compute_s at plan.compute_s_batch, in proportion to the
batch). Measured here as well: the model's bytes S, the host copies and
the servers' update time.

The answers (planner/recommend.py): the per-device batch, from the
predicted throughput of the whole step on that cluster; all-reduce (which)
or PS (how many shards); the most hosts that still scale above 80% and what
limits them; whether the hosts' cores keep up with their devices (an
input-bound cluster's throughput is capped at what the cores decode). Writes plan.json and plan.png; prints the answers and a table.

The cluster's predictions leave out this host's copies between emulated
devices and host memory (measured and reported as host_copies; the study
adds them, since it predicts the emulation on this host).
"""

import json
import math
import os

from absl import logging
import jax

from configs import values
from coordination import workdir_lock
from core import units
from core.errors import UsageError
from planner import checks
from planner import cluster_model as cm
from planner import from_probe
from planner import measure
from planner import recommend
from trainer import experiment
from trainer import memory
from trainer.engines import emulation

PLAN_FILE = 'plan.json'


def _powers_of_two_to(limit: int) -> list[int]:
  return [2**i for i in range(int(math.log2(max(limit, 1))) + 1)]


def run_plan(config, workdir: str) -> dict:
  """Measures here, then writes plan.json and its plots; returns the plan."""
  if not config.plan.probe:
    checks.check_one_process('plan', jax.process_count())
  with workdir_lock.hold(workdir, 'plan', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    if config.plan.parallelism == 'mesh':
      from planner import mesh_plan  # pylint: disable=g-import-not-at-top
      return mesh_plan.run_mesh_plan(config, workdir)
    if config.plan.probe:
      return _plan_from_probe(config, workdir)
    return _measure_and_plan(config, workdir)


def _plan_from_probe(config, workdir: str) -> dict:
  """SPMD data parallelism on the probed cluster and on more hosts of the
  same kind, from probe.json alone (planner/from_probe.py): plan.json and
  the answers, no plot."""
  probe = from_probe.load(config.plan.probe)
  from_probe.check_same_model(probe, config)
  probed = probe['provenance']['device_count']
  per_host = probe['hosts']['devices_per_host'][0]
  target = config.plan.num_workers or probed
  if target % per_host:
    raise UsageError(f'plan.num_workers={target}: the probed hosts hold {per_host} devices '
                     'each; plan a multiple of that')
  counts = sorted({probed, target} | {h * per_host for h in _powers_of_two_to(2 * target // per_host)})
  rows = from_probe.predict(probe, counts)
  at_target = [r for r in rows if r['num_devices'] == target]
  best = max(at_target, key=lambda r: r['images_per_sec'])
  scaling = [r for r in rows if r['per_device_batch'] == best['per_device_batch']]
  scale = [r['num_devices'] for r in scaling if r['efficiency'] >= 0.8]
  answers = [
      f'per-device batch: {best["per_device_batch"]} ({best["images_per_sec"]:,.0f} images/s '
      f'predicted on {target} devices, step {best["step_s"] * 1e3:.4g} ms, '
      f'{100 * best["efficiency"]:.0f}% efficiency)',
      (f'scales above 80% up to {max(scale) // per_host} host(s) of {per_host}'
       if scale else f'below 80% efficiency already at {min(counts)} devices'),
      f'from the probe of {probed} device(s) on {len(probe["hosts"]["devices_per_host"])} '
      f'host(s), {probe["provenance"]["date"]}; nothing measured here',
  ]
  result = {
      'model': config.model.name, 'image_size': config.data.image_size,
      'source': 'probe', 'probe': os.path.abspath(config.plan.probe),
      'probe_provenance': probe['provenance'],
      'inputs_from': from_probe.sources(probe),
      'cluster': {'num_workers': target, 'devices_per_host': per_host,
                  'num_hosts': target // per_host, 'strategy': 'spmd data parallelism'},
      'recommended': {'per_device_batch': best['per_device_batch'],
                      'max_devices_that_scale': max(scale) if scale else None},
      'answers': answers,
      'predicted': rows,
  }
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, PLAN_FILE), 'w') as f:
    json.dump(result, f, indent=1)
  lines = [f'{config.model.name} at {config.data.image_size} px, planned from '
           f'{config.plan.probe}:', *answers, '',
           f'{"batch":>6} {"devices":>8} {"step ms":>9} {"images/s":>10} {"eff.":>6}']
  lines += [f'{r["per_device_batch"]:>6} {r["num_devices"]:>8} {r["step_s"] * 1e3:>9.4g} '
            f'{r["images_per_sec"]:>10.4g} {100 * r["efficiency"]:>5.1f}%' for r in rows]
  print('\n'.join(lines), flush=True)
  logging.info('Wrote %s', os.path.join(workdir, PLAN_FILE))
  return result


def describe_cluster(plan, num_workers: int) -> cm.Cluster:
  """The cluster of plan.*, num_workers devices in all."""
  g = plan.devices_per_host
  if num_workers % g:
    raise UsageError(f'plan.devices_per_host={g} does not divide the cluster\'s '
                     f'{num_workers} devices (plan.num_workers, or the local workers)')
  return cm.Cluster(num_hosts=num_workers // g, devices_per_host=g,
                    nic_bandwidth=units.gbps_to_bytes_per_s(plan.link_bandwidth_gbps),
                    nic_latency_s=plan.link_latency_ms / 1e3,
                    intra_bandwidth=units.gbps_to_bytes_per_s(plan.intra_host_gbps),
                    intra_latency_s=plan.intra_host_latency_ms / 1e3,
                    host_cores=plan.host_cores,
                    host_cpu_s_per_image=plan.host_cpu_ms_per_image / 1e3)


def backprop_share(plan) -> float:
  """plan.backprop_share, checked: the share of T_C that overlapped
  communication hides behind, in (0, 1]."""
  share = plan.backprop_share
  if not 0 < share <= 1:
    raise UsageError(f'plan.backprop_share={share!r} must be in (0, 1]: the share of T_C, '
                     'at its end, that the backward pass takes')
  return share


def _cluster_compute(plan, exp, local_workers, batches, capacity, model_name) -> tuple:
  """([{per_worker_batch, compute_s (the cluster's T_C), flops, peak_bytes,
  ...}], how T_C was found)."""
  measured = not (plan.compute_s or plan.device_tflops)
  # With the cluster's own T_C, each batch is compiled for its FLOPs and
  # memory, not run.
  points = [vars(p) for p in measure.compute_sweep(
      exp, local_workers, batches, plan.repeats if measured else 0, capacity)]
  for p in points:
    here = p.pop('images_per_sec')
    if measured:
      p['images_per_sec_here'] = here
  if measured:
    return points, f'measured here on {local_workers} worker(s)'
  if plan.compute_s:
    anchor = plan.compute_s_batch or min(batches)
    for p in points:
      p['compute_s'] = plan.compute_s * p['per_worker_batch'] / anchor
    return points, f'stated: {plan.compute_s:g} s at batch {anchor}, in proportion'
  if any(p['flops'] <= 0 for p in points):
    raise UsageError(f'plan.device_tflops: XLA reports no FLOPs for {model_name} here; '
                     'state plan.compute_s instead')
  for p in points:
    p['compute_s'] = p['flops'] / (plan.device_tflops * 1e12 * plan.device_utilization)
  return points, (f'XLA\'s FLOPs at {plan.device_tflops:g} TFLOP/s x '
                  f'{plan.device_utilization:g}')


def _measure_and_plan(config, workdir: str) -> dict:
  plan = config.plan  # values checked by planner/checks.py
  share = backprop_share(plan)  # before anything is measured
  batches = values.plan_batches(config)
  local_workers = emulation.NetworkSpec.from_config(config.network, jax.device_count()).num_workers
  if local_workers > jax.device_count():
    raise UsageError(f'network.num_workers={local_workers}: the sweep runs that many '
                     f'workers here, but {jax.device_count()} devices are present')
  cluster = describe_cluster(plan, plan.num_workers or local_workers)
  algorithms = values.parse_names('plan.allreduce_algorithms', plan.allreduce_algorithms,
                                  cm.ALLREDUCE_ALGORITHMS, 'algorithm')
  strategies = algorithms + ['ps']
  # Speed is measured on synthetic data: no input pipeline in the way.
  config = config.copy_and_resolve_references()
  config.data.source = 'synthetic'
  config.data.num_synthetic_examples = max(batches) * local_workers
  exp = experiment.build_experiment(config, workdir)
  capacity = (int(plan.device_memory_gib * memory.GIB) if plan.device_memory_gib
              else measure.capacity(exp))

  # --- Measure, here.
  points, compute_source = _cluster_compute(plan, exp, local_workers, batches, capacity,
                                            config.model.name)
  if not points:
    raise UsageError(f'plan.per_worker_batch_sizes={plan.per_worker_batch_sizes!r}: not even the '
                     f'smallest mini-batch fits the device memory')
  size = measure.model_bytes(exp)
  logging.info('Plan: measuring the host copies and the shards\' update time')
  host_copies = measure.host_copies_s(exp, plan.repeats)
  update = measure.update_s(exp, min(local_workers, cluster.num_workers), 1, plan.repeats)

  # --- Recommend and predict, for the cluster.
  kw = dict(placement=plan.ps_placement, update_s=update, overlap=plan.overlap,
            overlap_share=share)
  rec = recommend.recommend({p['per_worker_batch']: p['compute_s'] for p in points}, size,
                            cluster, strategies=strategies, **kw)
  batch = rec['per_device_batch']
  compute = next(p['compute_s'] for p in points if p['per_worker_batch'] == batch)
  largest = max(p['per_worker_batch'] for p in points)
  answers = recommend.words(
      rec, cluster, placement=plan.ps_placement, largest_batch=largest,
      stopped_by_memory=len(points) < len(batches),
      memory_gib=capacity / memory.GIB if capacity else None,
      nic_gbps=plan.link_bandwidth_gbps)

  def at(c: cm.Cluster, strategy: str, shards: int | None = None) -> dict:
    e = recommend.evaluate(strategy, compute, size, c, num_shards=shards,
                           per_device_batch=batch, **kw)
    e['images_per_sec'] = c.num_workers * batch / e['step_s']
    return {k: v for k, v in e.items() if k != 'parts'}
  hosts = sorted(set(_powers_of_two_to(max(2 * cluster.num_hosts,
                                           2 * (rec['max_hosts_that_scale'] or 1), 2)))
                 | {cluster.num_hosts})
  by_hosts = [{'num_hosts': h, 'num_workers': h * cluster.devices_per_host,
               **{s: at(cluster.with_hosts(h), s, rec['num_shards'] if s == 'ps' else None)
                  for s in strategies}} for h in hosts]
  by_shards = [at(cluster, 'ps', n) for n in
               _powers_of_two_to(max(2 * rec['num_shards'], 2 * cluster.num_hosts))]

  result = {
      'model': config.model.name, 'image_size': config.data.image_size,
      'measured_on': {'devices': jax.device_count(), 'platform': jax.devices()[0].platform,
                      'workers': local_workers},
      'model_bytes': size,
      'compute_sweep': points,
      'host_copies': host_copies,
      'update_s': update,
      'cluster': {'num_workers': cluster.num_workers, 'num_hosts': cluster.num_hosts,
                  'devices_per_host': cluster.devices_per_host,
                  'bandwidth_gbps': plan.link_bandwidth_gbps,
                  'latency_ms': plan.link_latency_ms,
                  'intra_host_gbps': plan.intra_host_gbps,
                  'intra_host_latency_ms': plan.intra_host_latency_ms,
                  'ps_placement': plan.ps_placement, 'overlap': plan.overlap,
                  'backprop_share': share,
                  'host_cores': plan.host_cores,
                  'host_cpu_ms_per_image': plan.host_cpu_ms_per_image,
                  'strategies': strategies,
                  'device_memory_gib': capacity / memory.GIB if capacity else None,
                  'compute_s': compute, 'compute_s_source': compute_source},
      'recommended': {**{k: v for k, v in rec.items() if k != 'by_batch'},
                      'per_worker_batch': batch},
      'answers': answers,
      'predicted_by_batch': rec['by_batch'],
      'predicted_by_hosts': by_hosts,
      'predicted_by_shards': by_shards,
  }
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, PLAN_FILE), 'w') as f:
    json.dump(result, f, indent=1)
  _plot(result, workdir)
  print(printed_text(result), flush=True)
  logging.info('Wrote %s', os.path.join(workdir, PLAN_FILE))
  return result


def printed_text(result: dict) -> str:
  """What --mode=plan prints, from its plan.json."""
  cluster, strategies = result['cluster'], result['cluster']['strategies']
  lines = [
      f'{result["model"]} at {result["image_size"]} px: S = '
      f'{result["model_bytes"] / 1e6:.1f} MB; T_C = {cluster["compute_s"] * 1e3:.4g} ms '
      f'at {result["recommended"]["per_device_batch"]} per device ({cluster["compute_s_source"]})',
      *result['answers'],
      '', 'predicted at that batch, by number of hosts (images/s; efficiency):',
      f'{"hosts":>6} {"devices":>8} ' + ' '.join(f'{s:>22}' for s in strategies)]
  for row in result['predicted_by_hosts']:
    lines.append(f'{row["num_hosts"]:>6} {row["num_workers"]:>8} ' + ' '.join(
        f'{row[s]["images_per_sec"]:>14.4g} {100 * row[s]["efficiency"]:>6.1f}%'
        for s in strategies))
  return '\n'.join(lines)


def _plain(value: float, _=None) -> str:
  return f'{value:,.0f}' if value >= 10 else f'{value:g}'


def _readable_log_axis(axis, values=None) -> None:
  """A log axis labelled in plain numbers (no 2x10^0): ticks at `values`,
  else at the powers of ten (and 2 and 5 times them over a short range)."""
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  if values is None:
    ax = axis.axes
    low, high = ax.get_ylim() if axis is ax.yaxis else ax.get_xlim()  # autoscaled by now
    short = high / max(low, 1e-300) < 1e3
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if short else (1.0,)))
  else:
    axis.set_ticks(sorted(set(values)))
  axis.set_major_formatter(ticker.FuncFormatter(_plain))
  axis.set_minor_formatter(ticker.NullFormatter())


def _plot(result: dict, workdir: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  cluster, rec = result['cluster'], result['recommended']
  shape = (f'{cluster["num_hosts"]} hosts of {cluster["devices_per_host"]}, '
           f'{cluster["bandwidth_gbps"]:g} Gbit/s NICs')
  labels = {'ring': 'ring all-reduce', 'hierarchical': 'hierarchical all-reduce',
            'ps': recommend.strategy_name('ps', rec['num_shards'], cluster['ps_placement'])}
  fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
  batches = sorted(int(b) for b in result['predicted_by_batch'])
  for i, strategy in enumerate(cluster['strategies']):
    axes[0].plot(batches, [result['predicted_by_batch'][b][i]['images_per_sec']
                           for b in batches], marker='o',
                 label='PS' if strategy == 'ps' else labels[strategy])
  axes[0].axvline(rec['per_device_batch'], color='grey', ls='--', label='chosen batch')
  axes[0].set(xscale='log', yscale='log', xlabel='per-device batch',
              ylabel='images/s, whole cluster (predicted)',
              title=f'predicted throughput vs batch\n{shape}')
  _readable_log_axis(axes[0].xaxis, batches)
  _readable_log_axis(axes[0].yaxis)
  hosts = [row['num_hosts'] for row in result['predicted_by_hosts']]
  for strategy in cluster['strategies']:
    axes[1].plot(hosts, [row[strategy]['images_per_sec'] for row in result['predicted_by_hosts']],
                 marker='o', label=labels[strategy])
  ideal = [row['num_workers'] * rec['per_device_batch'] / cluster['compute_s']
           for row in result['predicted_by_hosts']]
  axes[1].plot(hosts, ideal, color='black', ls=':', label='compute alone')
  axes[1].plot(hosts, [recommend.THRESHOLD * v for v in ideal], color='grey', ls=':',
               label=f'{recommend.THRESHOLD:.0%} of it')
  axes[1].axvline(cluster['num_hosts'], color='grey', ls='--', label='this cluster')
  axes[1].set(xscale='log', yscale='log', xlabel=f'hosts of {cluster["devices_per_host"]}',
              ylabel='images/s (predicted)',
              title=f'predicted throughput vs hosts, batch {rec["per_device_batch"]}')
  _readable_log_axis(axes[1].xaxis, hosts)
  _readable_log_axis(axes[1].yaxis)
  shards = [row['num_shards'] for row in result['predicted_by_shards']]
  axes[2].plot(shards, [row['step_s'] for row in result['predicted_by_shards']], marker='o',
               label=f'PS ({cluster["ps_placement"]})')
  axes[2].axvline(rec['num_shards'], color='grey', ls='--', label='recommended')
  axes[2].set(xscale='log', xlabel='PS shards', ylabel='step time (s, predicted)',
              title='predicted PS step time vs shards')
  _readable_log_axis(axes[2].xaxis, shards)
  for ax in axes:
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, 'plan.png'), dpi=100)
  plt.close(fig)
