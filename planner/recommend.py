"""The plan's answers, from T_C(b) and the cluster's cost model.

Pure: given the cluster's compute time at each per-device batch that fits,
the model's bytes S and the servers' update time, it picks the batch from
the predicted throughput of the whole step (compute plus communication on
that cluster), the strategy (an all-reduce algorithm or PS with N_ps
shards), the most hosts that still scale above the threshold and what
limits them, and says it in words.
"""

from trainer import host_input
from core import units
from planner import cluster_model as cm
from planner import formulas

THRESHOLD = 0.8  # "scales": at least this scaling efficiency
_MOST_HOSTS = 4096  # max_scaling_hosts looks no further
_LARGEST_BATCH = 2**24  # batch_to_scale looks no further


def evaluate(strategy: str, compute_s: float, model_bytes: float, cluster: cm.Cluster, *,
             placement: str, update_s: float, overlap: bool,
             overlap_share: float = cm.BACKPROP_SHARE,
             num_shards: int | None = None, per_device_batch: int = 0) -> dict:
  """One strategy's step on `cluster`: PS takes `num_shards`, or ps_shards'
  choice; the servers' update, update_s with one shard, splits over them.
  With `per_device_batch` the hosts' cores count (cluster.host_cores): the
  step waits for the input pipeline when they decode slower."""
  shards = 0
  if strategy == 'ps':
    shards = num_shards or ps_shards(compute_s, model_bytes, cluster, placement=placement,
                                     update_s=update_s, overlap=overlap,
                                     overlap_share=overlap_share)
  common = dict(num_shards=max(shards, 1), placement=placement,
                update_s=update_s / max(shards, 1), overlap=overlap,
                overlap_share=overlap_share)
  device_step = cm.step_s(strategy, compute_s, model_bytes, cluster, **common)
  step, parts = cm.step_parts(strategy, compute_s, model_bytes, cluster, **common,
                              input_s=cm.host_input_s(cluster, per_device_batch))
  return {'strategy': strategy, 'num_shards': shards, 'step_s': step,
          'device_step_s': device_step,
          'efficiency': cm.efficiency(compute_s, step),
          'images_per_sec': None, 'parts': parts,
          'limited_by': cm.limiting_resource(parts),
          'per_device_batch': per_device_batch,
          'input_bound': 'host_cpu' in parts}


def ps_shards(compute_s: float, model_bytes: float, cluster: cm.Cluster, *,
              placement: str, update_s: float, overlap: bool,
              overlap_share: float = cm.BACKPROP_SHARE, tolerance: float = 0.05) -> int:
  """The fewest shards, up to one per device, whose PS step comes within
  `tolerance` of the shortest: past the links (cluster_model.min_ps_shards)
  more shards still split the servers' update."""
  steps = {n: cm.step_s('ps', compute_s, model_bytes, cluster, num_shards=n,
                        placement=placement, update_s=update_s / n, overlap=overlap,
                        overlap_share=overlap_share)
           for n in range(1, cluster.num_workers + 1)}
  shortest = min(steps.values())
  return min(n for n, step in steps.items() if step <= (1 + tolerance) * shortest)


def _best(compute_s, model_bytes, cluster, strategies, **kw) -> dict:
  """The strategy with the shortest step (the first listed on a tie)."""
  options = [evaluate(s, compute_s, model_bytes, cluster, **kw) for s in strategies]
  return min(options, key=lambda e: e['step_s'])


def scaling_limit(evaluation: dict, compute_s: float, model_bytes: float,
                  cluster: cm.Cluster, **kw) -> tuple[int | None, str]:
  """(the most hosts that still scale with this strategy and shard count,
  the resource that stops it: the one, besides compute, that takes the
  most of the first step that falls short; compute when none does)."""
  strategy, shards = evaluation['strategy'], evaluation['num_shards'] or None
  def at(hosts):
    return evaluate(strategy, compute_s, model_bytes, cluster.with_hosts(hosts),
                    num_shards=shards, per_device_batch=evaluation['per_device_batch'],
                    **kw)
  hosts = cm.max_scaling_hosts(lambda h: at(h)['efficiency'], THRESHOLD, _MOST_HOSTS)
  if hosts is None:
    return None, 'compute'
  parts = dict(at(hosts + 1)['parts'])
  parts.pop('compute')
  return hosts, cm.limiting_resource(parts) if parts else 'compute'


def batch_to_scale(per_example_s: float, model_bytes: float, cluster: cm.Cluster,
                   strategies, start: int, **kw) -> int | None:
  """About the smallest per-device batch from `start` up at which the best
  strategy scales on `cluster`, T_C growing in proportion to the batch;
  None when none up to 2**24 does."""
  def scales(b):
    return _best(per_example_s * b, model_bytes, cluster, strategies,
                 per_device_batch=b, **kw)['efficiency'] >= THRESHOLD
  low, high = start, start
  while not scales(high):
    if high >= _LARGEST_BATCH:
      return None
    low, high = high, high * 2
  while high - low > 1:
    middle = (low + high) // 2
    low, high = (low, middle) if scales(middle) else (middle, high)
  return high


def recommend(compute_by_batch: dict, model_bytes: float, cluster: cm.Cluster, *,
              strategies, placement: str, update_s: float, overlap: bool,
              overlap_share: float = cm.BACKPROP_SHARE, tolerance: float = 0.05) -> dict:
  """The batch, strategy, shards and scaling of the plan (see the module)."""
  kw = dict(placement=placement, update_s=update_s, overlap=overlap,
            overlap_share=overlap_share)
  n = cluster.num_workers
  by_batch = {}
  for b, compute in sorted(compute_by_batch.items()):
    options = [evaluate(s, compute, model_bytes, cluster, per_device_batch=b, **kw)
               for s in strategies]
    for e in options:
      e['images_per_sec'] = n * b / e['step_s']
    by_batch[b] = options
  throughput = {b: max(e['images_per_sec'] for e in options)
                for b, options in by_batch.items()}
  batch = formulas.choose_batch_size(throughput, tolerance)
  best = max(by_batch[batch], key=lambda e: e['images_per_sec'])
  compute = compute_by_batch[batch]
  hosts, limit = scaling_limit(best, compute, model_bytes, cluster, **kw)
  largest = max(compute_by_batch)
  best_at_largest = max(by_batch[largest], key=lambda e: e['efficiency'])
  scales_somewhere = any(e['efficiency'] >= THRESHOLD
                         for options in by_batch.values() for e in options)
  needed = None
  if not scales_somewhere:
    needed = batch_to_scale(compute_by_batch[largest] / largest, model_bytes, cluster,
                            strategies, largest, **kw)
  # PS on a link slower than one host's own traffic: no shard count helps.
  host_bytes = cm.ps_host_bytes(model_bytes, cluster, placement)
  # What the devices would take if the cores kept up, per host.
  device_images_per_host = cluster.devices_per_host * batch / best['device_step_s']
  return {
      'per_device_batch': batch,
      'global_batch': batch * n,
      'strategy': best['strategy'],
      # PS's shards at this batch, whichever strategy wins.
      'num_shards': next((e['num_shards'] for e in by_batch[batch] if e['strategy'] == 'ps'),
                         0),
      # The shards whose links carry a direction within T_C (the lemma).
      'min_shards_to_hide_traffic': cm.min_ps_shards(model_bytes, cluster, compute, placement),
      'step_s': best['step_s'],
      'efficiency': best['efficiency'],
      'images_per_sec': best['images_per_sec'],
      'limited_by_now': cm.limiting_resource(best['parts']),
      'input_bound': best['input_bound'],
      'device_images_per_sec_per_host': device_images_per_host,
      'host_cores': cluster.host_cores,
      'host_cpu_ms_per_image': cluster.host_cpu_s_per_image * 1e3,
      'host_cores_needed': (host_input.cores_needed(
          device_images_per_host, cluster.host_cpu_s_per_image * 1e3)
          if cluster.host_cores else None),
      'max_hosts_that_scale': hosts,
      'scaling_limited_by': limit,
      'no_batch_scales': not scales_somewhere,
      'batch_to_scale': needed,
      'best_at_largest_batch': {k: best_at_largest[k] for k in
                                ('strategy', 'efficiency', 'num_shards')},
      'ps_host_bytes': host_bytes,
      'link_bound': formulas.link_bound(host_bytes, cluster.nic_bandwidth, compute),
      'bandwidth_to_hide_gbps': units.bytes_per_s_to_gbps(formulas.bandwidth_to_hide(host_bytes, compute)),
      'by_batch': {b: [{k: v for k, v in e.items() if k != 'parts'} for e in options]
                   for b, options in by_batch.items()},
  }


def _count(number: int, thing: str) -> str:
  return f'{number} {thing}{"s" if number != 1 else ""}'


def strategy_name(strategy: str, num_shards: int = 0, placement: str = '') -> str:
  if strategy == 'ps':
    where = 'dedicated server hosts' if placement == 'dedicated' else 'the worker hosts'
    return f'PS with {_count(num_shards, "shard")} on {where}'
  return f'{strategy} all-reduce'


def words(rec: dict, cluster: cm.Cluster, *, placement: str, largest_batch: int,
          stopped_by_memory: bool, memory_gib: float | None, nic_gbps: float) -> list[str]:
  """The plan's answers as sentences."""
  g, h = cluster.devices_per_host, cluster.num_hosts
  shape = f'{_count(h, "host")} of {_count(g, "device")}'
  name = strategy_name(rec['strategy'], rec['num_shards'], placement)
  lines = [
      f'per-device batch: {rec["per_device_batch"]} (global {rec["global_batch"]}), the '
      'smallest within 5% of the best predicted throughput of the whole step',
      f'use: {name}; on {shape}: step {rec["step_s"]:.4g} s, '
      f'{100 * rec["efficiency"]:.0f}% scaling efficiency, '
      f'{rec["images_per_sec"]:.4g} images/s; most of the step: '
      f'{cm.RESOURCES[rec["limited_by_now"]]}',
      f'PS shards for {cluster.num_workers} devices ({shape}) on {nic_gbps:g} Gbit/s: '
      f'{rec["num_shards"]} ({placement})',
  ]
  hosts, limit = rec['max_hosts_that_scale'], cm.RESOURCES[rec['scaling_limited_by']]
  if hosts is None:
    lines.append(f'scales above {THRESHOLD:.0%} on every cluster up to {_MOST_HOSTS} hosts '
                 f'of {g}: compute limits it')
  elif hosts == 0:
    lines.append(f'does not scale above {THRESHOLD:.0%} even on 1 host; the limit: {limit}')
  else:
    lines.append(f'largest cluster that scales above {THRESHOLD:.0%} with {name}: '
                 f'{_count(hosts, "host")} ({_count(hosts * g, "device")}); beyond it, '
                 f'the limit: {limit}')
  if rec['no_batch_scales']:
    reach = (f'that fits the device memory ({memory_gib:g} GiB; up to {largest_batch})'
             if stopped_by_memory else f'tried (up to {largest_batch}; larger ones were not '
             'tried: add them to plan.per_worker_batch_sizes)')
    best = rec['best_at_largest_batch']
    needed = rec['batch_to_scale']
    lines.append(
        f'no per-device batch {reach} makes {shape} scale above {THRESHOLD:.0%}: at '
        f'{largest_batch} the best, {strategy_name(best["strategy"], best["num_shards"], placement)}, '
        f'reaches {100 * best["efficiency"]:.1f}%; ' +
        (f'it would take a per-device batch of about {needed:,}' if needed else
         'no batch up to 2**24 would') + ' (T_C in proportion to the batch), or ' +
        # A host's input grows with the batch as T_C does: no batch helps.
        (f'{rec["host_cores_needed"]} host cores' if rec['input_bound'] else
         'a faster network'))
  if rec['input_bound']:
    lines.append(
        f'{host_input.verdict(rec["device_images_per_sec_per_host"], rec["host_cores"], rec["host_cpu_ms_per_image"])}; '
        f'the predicted throughput is capped at what the cores decode, '
        f'{rec["images_per_sec"]:.4g} images/s on {shape}')
  elif rec['host_cores']:
    lines.append(host_input.verdict(rec['device_images_per_sec_per_host'],
                                    rec['host_cores'], rec['host_cpu_ms_per_image']))
  if rec['link_bound']:
    lines.append(
        f'the link, not the number of shards, limits PS here: a host\'s own traffic, '
        f'{rec["ps_host_bytes"] / 1e6:.4g} MB each way, takes longer than T_C on '
        f'{nic_gbps:g} Gbit/s; '
        f'{rec["bandwidth_to_hide_gbps"]:.3g} Gbit/s or more would let PS scale')
  return lines
