"""--mode=plan with plan.parallelism=mesh: the fastest (data, fsdp, tensor)
mesh, ZeRO-1, remat and accumulation that fits the cluster's devices.

For every candidate of planner/mesh_candidates.py the configured train step
is compiled (never run) on this job's devices, one per device of the
cluster, in the cluster's dtype (bfloat16 under model.dtype=auto), and read:

- memory per device: XLA's memory analysis of the compiled step, as the
  trainer's start-up check reads it (trainer/memory.py);
- compute: the per-device program's FLOPs (XLA's cost analysis) at
  plan.device_tflops x plan.device_utilization, or at the rate a probe of
  the cluster, or one of its hosts, measured (plan.probe;
  planner/mesh_from_probe.py);
- communication: each collective of the program, its bytes and device
  groups, costed on the cluster's links, configured or probed
  (planner/mesh_cost.py).

A ViT deeper than two blocks is compiled at one and at two blocks and every
term (bytes, FLOPs, seconds) extrapolated linearly to its depth: each block
adds the same parameters, activations and collectives (plan.mesh_derive;
tests/test_mesh_plan.py holds the derivation against full compiles). Each
mesh's entry is the first rung of the memory ladder (remat, then
accumulation) whose step fits plan.device_memory_gib, found with few
compiles and skipped for meshes that cannot be among the fastest
(planner/mesh_search.py). Writes plan.json; prints the answers and a table.
Every compile is kept in the work dir (mesh_compiles.jsonl): planning again
there for other memory or links reuses it. With plan.time_steps (and a probe
of this job's own devices), the fastest entry and the next two then run that
many real steps each here (planner/mesh_timing.py), and the fastest timed is
the plan's command: a close call is settled by measurement where it can be.
A plan from a probe may run as every process of a job (launch.py, a
scheduler): each compiles and costs the same, and process 0 writes and
prints.
"""

import hashlib
import json
import os
import sys

from absl import logging
import jax

from coordination import agreement
from core.errors import UsageError
from models import registry
from models import vit
from planner import mesh_candidates as mc
from planner import mesh_cost
from planner import mesh_from_probe
from planner import mesh_search
from planner import mesh_timing
from trainer import hlo_collectives
from trainer import experiment
from trainer import memory
from trainer import mfu
from trainer import specs
from trainer.engines import spmd

PLAN_FILE = 'plan.json'
COMPILES_FILE = 'mesh_compiles.jsonl'
# The plan reads the compiled program (its memory, FLOPs and collectives)
# and never runs it: the CPU backend's code optimisations, a large share of
# a compile on the CPU, change none of those (tests/test_mesh_plan.py).
PLAN_COMPILER_OPTIONS = {'xla_backend_optimization_level': 0}
GIB = 2**30
# The plan answers the fastest entry and the next two, exactly (mesh_search).
_ANSWERED = 3
# What a compile's terms hold; a cached compile of other terms is made again.
_TERMS_VERSION = 4
# opt_state: one device's share of the optimiser's state; opt_state_full:
# the whole model's, whose ratio is the share of the update a device computes.
_SUMMED = ('peak', 'params', 'opt_state', 'opt_state_full', 'temporaries', 'flops',
           'bytes_accessed')
_NO_COLLECTIVE = {'count': 0, 'operands': 0, 'bytes': 0, 'seconds': 0.0}


def tensor_split_sizes(config) -> list[int]:
  """What the tensor axis splits (configs/sharding.py's FSDP_TENSOR): a
  ViT's heads and MLP width, a ResNet's channels (its stem's, which every
  stage multiplies)."""
  name = config.model.name
  if registry.is_vit(name):
    variant = vit.VARIANTS[registry.vit_variant(name)]
    if config.model.width:
      return [max(1, config.model.width // 64), 4 * config.model.width]
    return [variant['num_heads'], variant['mlp_dim']]
  return [config.model.width or 64]


def full_depth(config) -> int:
  """A ViT's blocks (model.depth, else its variant's); 0 for other models."""
  if not registry.is_vit(config.model.name):
    return 0
  return config.model.depth or vit.VARIANTS[registry.vit_variant(config.model.name)]['depth']


def compile_candidate(config, candidate: mc.Candidate, num_classes: int, *,
                      depth: int = 0, dtype: str,
                      compiler_options: dict = PLAN_COMPILER_OPTIONS) -> dict:
  """One compile of the train step for `candidate` (at `depth` blocks, if
  given): its memory, FLOPs, bytes accessed and collectives (op, bytes,
  arrays and the devices of its first group), before any link costs them."""
  config = config.copy_and_resolve_references()
  config.engine = 'spmd'
  config.update_from_flattened_dict(candidate.config_values())
  config.model.dtype = dtype
  if depth:
    config.model.depth = depth
  exp = experiment.build_without_data(config, num_classes)
  batch = specs.batch_spec(config.batch_size, config.data.image_size, exp.batch_sharding)
  with exp.tracing_context():
    lowered = spmd.jit_train_step(exp).lower(exp.abstract_state, batch)
    compiled = lowered.compile(compiler_options=compiler_options)
  report = memory.report(compiled, exp.abstract_state)
  collectives = []
  for op in hlo_collectives.collectives_in(compiled.as_text()):
    groups = op['groups'] or mesh_cost.device_groups_all(jax.device_count())
    if len(groups[0]) > 1:
      collectives.append({'op': op['op'], 'bytes': op['bytes'], 'operands': op['operands'],
                          'group': groups[0], 'runs': op['runs']})
  return {'peak': report.peak, 'params': report.params, 'opt_state': report.opt_state,
          'opt_state_full': memory.global_bytes(exp.abstract_state.opt_state),
          'temporaries': report.temporaries,
          'flops': mfu.xla_flops(compiled, candidate.grad_accum),
          'bytes_accessed': mfu.xla_bytes_accessed(compiled, candidate.grad_accum),
          'collectives': collectives}


def costed(compiled: dict, plan_links: mesh_cost.Links) -> dict:
  """A compile's terms with its collectives costed on the links, summed by
  op and level (`collectives`) and by op, level and group size
  (`collectives_by_group`, which says which groups a cost comes from)
  (pure)."""
  comm, by_group = {}, {}
  for op in compiled['collectives']:
    cost_op = mesh_cost.collective_s(op['op'], op['bytes'], [op['group']], plan_links,
                                     op['operands'])
    key = f'{op["op"]} {cost_op["level"]}'
    for summed, name in ((comm, key), (by_group, f'{key}, groups of {cost_op["group_size"]}')):
      entry = summed.setdefault(name, dict(_NO_COLLECTIVE))
      # A collective in gradient accumulation's loop runs once a micro-batch.
      entry['count'] += op['runs']
      entry['operands'] += op['runs'] * op['operands']
      entry['bytes'] += op['runs'] * op['bytes']
      entry['seconds'] += op['runs'] * cost_op['seconds']
  return {**{k: compiled[k] for k in _SUMMED}, 'collectives': comm,
          'collectives_by_group': by_group}


class CompileCache:
  """The compiles of earlier plans in the same work dir (COMPILES_FILE, one
  JSON line each), keyed by everything the compile depends on: the config
  without its plan.* keys, the candidate, the depth, the dtype and the
  device count. Re-planning the same model for other memory, links or a
  probe compiles only what it has not compiled before."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, COMPILES_FILE)
    self.entries, self.compiled, self.reused = {}, 0, 0
    if os.path.exists(self.path):
      with open(self.path) as f:
        for line in f:
          try:
            entry = json.loads(line)
          except json.JSONDecodeError:
            continue  # a line cut short when a plan was killed: compiled again
          self.entries[entry['key']] = entry['terms']

  @staticmethod
  def key(config, candidate: mc.Candidate, depth: int, dtype: str) -> str:
    without_plan = {k: v for k, v in config.to_dict().items() if k != 'plan'}
    fields = [without_plan, candidate.config_values(), depth, dtype, jax.device_count(),
              jax.__version__, _TERMS_VERSION]
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()

  def get(self, config, candidate, num_classes, *, depth: int = 0, dtype: str) -> dict:
    key = self.key(config, candidate, depth, dtype)
    if key in self.entries:
      self.reused += 1
      return self.entries[key]
    terms = compile_candidate(config, candidate, num_classes, depth=depth, dtype=dtype)
    self.compiled += 1
    self.entries[key] = terms
    if jax.process_index() == 0:  # every process compiles the same; one writes
      os.makedirs(os.path.dirname(self.path), exist_ok=True)
      with open(self.path, 'a') as f:
        f.write(json.dumps({'key': key, 'terms': terms}) + '\n')
    return terms


def derive(small: dict, larger: dict, small_depth: int, larger_depth: int,
           depth: int) -> dict:
  """Every term of two compiles at small_depth and larger_depth blocks,
  extrapolated linearly to `depth` (pure)."""
  at = lambda a, b: mesh_cost.extrapolate(a, b, small_depth, larger_depth, depth)
  out = {k: at(small[k], larger[k]) for k in _SUMMED}
  for summed in ('collectives', 'collectives_by_group'):
    out[summed] = {}
    for key in sorted(set(small[summed]) | set(larger[summed])):
      a, b = (c[summed].get(key, _NO_COLLECTIVE) for c in (small, larger))
      out[summed][key] = {k: at(a[k], b[k]) for k in _NO_COLLECTIVE}
  return out


def measure(config, candidate, num_classes, plan_links, dtype, cache: CompileCache) -> dict:
  """The candidate's terms: compiled at full depth, or derived."""
  depth = full_depth(config)
  compiled = lambda d: costed(cache.get(config, candidate, num_classes, depth=d, dtype=dtype),
                              plan_links)
  if config.plan.mesh_derive and depth > 2:
    return {**derive(compiled(1), compiled(2), 1, 2, depth), 'derived_from_depths': [1, 2]}
  return {**compiled(0), 'derived_from_depths': None}


def timed(terms: dict, costing: mesh_from_probe.Costing, plan, per_device_batch: float) -> dict:
  """The step's seconds from the terms: compute at the devices' rate for
  micro-batches of `per_device_batch`, the collectives as costed and the
  step's fixed cost when it communicates, summed (or overlapped:
  plan.overlap)."""
  share = costing.update_share(terms['params'], terms['opt_state'], terms['opt_state_full'])
  compute_s = costing.compute_s(terms['flops'], share, per_device_batch)
  comm_s = sum(c['seconds'] for c in terms['collectives'].values())
  if terms['collectives']:
    comm_s += costing.fixed_s
  return {'compute_s': compute_s, 'communication_s': comm_s,
          'step_s': mesh_cost.step_s(compute_s, comm_s, overlap=plan.overlap,
                                     backprop_share=plan.backprop_share)}


def _over(row: dict, best: dict) -> str:
  """How much slower `row` is predicted than `best`, in percent."""
  return f'+{100 * (row["step_s"] / best["step_s"] - 1):.1f}% over the fastest'


def _why_slower(row: dict, best: dict) -> str:
  """The term that costs `row` the most time against `best`."""
  diffs = {'compute': row['compute_s'] - best['compute_s']}
  for key in set(row['collectives']) | set(best['collectives']):
    get = lambda r: r['collectives'].get(key, {}).get('seconds', 0.0)
    diffs[key] = get(row) - get(best)
  term, extra = max(diffs.items(), key=lambda kv: kv[1])
  return f'{term} +{extra * 1e3:.3g} ms'


def _beyond_probed(rows: list[dict], costing: mesh_from_probe.Costing) -> str:
  """The answer that names the rows whose compute is costed at a rate the
  probe did not time (a micro-batch per device outside its batches), or ''."""
  beyond = [r for r in rows if costing.beyond_probed(r['micro_batch_per_device'])]
  if not beyond:
    return ''
  each = ', '.join(f'{r["name"]} at {r["micro_batch_per_device"]:g}' for r in beyond)
  low, high = costing.rates[0][0], costing.rates[-1][0]
  return (f'beyond the probe\'s batches ({low:g} to {high:g} images a device): {each} '
          'images a device, costed at the rate of the nearest probed batch; probe with '
          'plan.per_worker_batch_sizes covering them for their own')


def _command(row: dict) -> str:
  """main.py with the run's --config, its other --config.KEY overrides (not
  plan.* nor the row's own keys), and the row's mesh, remat and accumulation."""
  config_arg = next((a for a in sys.argv if a.startswith('--config=')), '--config=CONFIG')
  keys = mc.CONFIG_KEYS
  owned = tuple(f'--config.{k}=' for k in keys) + ('--config.plan.',)
  kept = [a for a in sys.argv[1:] if a.startswith('--config.') and not a.startswith(owned)]
  values = ' '.join(f'--config.{k}={str(row[k]).lower() if isinstance(row[k], bool) else row[k]}'
                    for k in keys)
  return ' '.join(['python main.py', config_arg, '--workdir=DIR', *kept, values])


def run_mesh_plan(config, workdir: str) -> dict:
  """Plans the mesh; writes plan.json and returns it. UsageError (exit 2)
  when nothing fits, naming the smallest device memory that would."""
  plan = config.plan
  n = jax.device_count()
  probe = None
  if plan.probe:
    probe, costing = mesh_from_probe.load(config, n)
    dtype = probe['model']['dtype']
    if plan.time_steps:
      mesh_from_probe.check_timeable(probe, n, jax.default_backend(), jax.process_count())
  else:
    if plan.device_tflops <= 0:
      raise UsageError('plan.parallelism=mesh needs plan.device_tflops (the cluster\'s '
                       'device peak in the model\'s dtype) or plan.probe: its compute '
                       'is costed from FLOPs')
    costing = mesh_from_probe.configured(plan)
    # bfloat16 under model.dtype=auto: what the cluster's GPUs compute in.
    dtype = 'bfloat16' if config.model.dtype == 'auto' else config.model.dtype
  if plan.num_workers and plan.num_workers != n:
    raise UsageError(f'plan.num_workers={plan.num_workers}: the mesh plan compiles for '
                     f'every device of the cluster, and this job has {n}; unset '
                     'XLA_FLAGS\' device count or set it to plan.num_workers')
  plan_links = costing.links
  capacity = plan.device_memory_gib * GIB if plan.device_memory_gib else float('inf')
  num_classes = config.model.num_classes or config.data.num_synthetic_classes
  divides = mc.tensor_divides(tensor_split_sizes(config))
  starts = mc.first_rungs(n, config.batch_size, divides)
  if not starts:
    raise UsageError(f'batch_size={config.batch_size} divides over no mesh of {n} devices')
  cache = CompileCache(workdir)

  def evaluate(candidate):
    terms = measure(config, candidate, num_classes, plan_links, dtype, cache)
    micro_batch = candidate.micro_batch(config.batch_size)
    row = {'name': candidate.name(), **candidate.config_values(), **terms,
           'micro_batch_per_device': micro_batch,
           **timed(terms, costing, plan, micro_batch),
           'fits': terms['peak'] <= capacity}
    logging.info('%s: peak %.2f GiB, step %.4g ms', row['name'], row['peak'] / GIB,
                 row['step_s'] * 1e3)
    return row

  rows, misses, not_climbed = mesh_search.climb(starts, config.batch_size, evaluate,
                                                 keep=_ANSWERED)
  result = {
      'model': config.model.name, 'image_size': config.data.image_size,
      'global_batch': config.batch_size, 'dtype': dtype,
      'costed_from': costing.source,
      'probe': probe['provenance'] if probe else None,
      'cluster': {'devices': n, 'devices_per_host': plan_links.devices_per_host,
                  'device_memory_gib': plan.device_memory_gib,
                  'device_tflops': plan.device_tflops,
                  'device_utilization': plan.device_utilization,
                  'nic_gbps': plan.link_bandwidth_gbps, 'nic_latency_ms': plan.link_latency_ms,
                  'intra_host_gbps': plan.intra_host_gbps,
                  'intra_host_latency_ms': plan.intra_host_latency_ms,
                  'overlap': plan.overlap},
      'fitting': rows, 'not_fitting': misses, 'not_climbed': not_climbed,
      'compiles': {'compiled': cache.compiled, 'reused': cache.reused},
  }
  os.makedirs(workdir, exist_ok=True)
  if not rows:
    smallest = min(r['peak'] for r in misses)
    result['answers'] = [f'nothing fits {plan.device_memory_gib:g} GiB']
    _write(workdir, result)
    best_miss = min(misses, key=lambda r: r['peak'])
    raise UsageError(f'no mesh of {n} devices fits plan.device_memory_gib='
                     f'{plan.device_memory_gib:g}: the smallest step ({best_miss["name"]}) '
                     f'needs {smallest / GIB:.2f} GiB per device')
  best = rows[0]
  answers = [f'fastest that fits: {best["name"]}, step {best["step_s"] * 1e3:.4g} ms '
             f'(compute {best["compute_s"] * 1e3:.4g} ms, communication '
             f'{best["communication_s"] * 1e3:.4g} ms), peak {best["peak"] / GIB:.2f} GiB '
             'per device',
             f'run it: {_command(best)}']
  for row in rows[1:_ANSWERED]:
    # How close it runs: a runner-up within what a probe's predictions move
    # from one probe to the next deserves a measured step beside the best.
    answers.append(f'next: {row["name"]}, {row["step_s"] * 1e3:.4g} ms, '
                   f'{_over(row, best)} ({_why_slower(row, best)})')
  for row in misses:
    answers.append(f'does not fit: {row["name"]}, peak {row["peak"] / GIB:.2f} GiB '
                   f'(temporaries {row["temporaries"] / GIB:.2f} GiB)')
  beyond = _beyond_probed(rows[:_ANSWERED], costing)
  if beyond:
    answers.append(beyond)
  if not_climbed:
    answers.append(f'not climbed: {len(not_climbed)} mesh(es) whose first rung is already '
                   f'slower than the {_ANSWERED} fastest entries (from '
                   f'{min(r["step_s"] for r in not_climbed) * 1e3:.4g} ms)')
  result['best'] = best['name']
  result['command'] = _command(best)
  if plan.time_steps:
    answers += _settle_by_timing(config, rows[:_ANSWERED], num_classes, result)
  result['answers'] = answers
  _write(workdir, result)
  lines = [f'{config.model.name} at {config.data.image_size} px, batch {config.batch_size} '
           f'over {n} devices ({n // plan_links.devices_per_host} host(s) of '
           f'{plan_links.devices_per_host}), costed from {costing.source}; {cache.compiled} '
           f'compile(s), {cache.reused} reused from {COMPILES_FILE}:', *answers, '',
           f'{"configuration":<44} {"step ms":>9} {"compute":>9} {"comm.":>9} {"peak GiB":>9}']
  lines += [f'{r["name"]:<44} {r["step_s"] * 1e3:>9.4g} {r["compute_s"] * 1e3:>9.4g} '
            f'{r["communication_s"] * 1e3:>9.4g} {r["peak"] / GIB:>9.3f}' for r in rows]
  if jax.process_index() == 0:
    print('\n'.join(lines), flush=True)
  return result


def check_same_answers(names: list[list[str]]) -> None:
  """UsageError (one line) unless every process (`names`: each one's
  answered configurations, in process order) answered the same."""
  if any(other != names[0] for other in names):
    raise UsageError(f'plan.time_steps: the processes answered {names}, not the same three '
                     'configurations; plan from one work dir and probe on every process')


def _settle_by_timing(config, answered: list[dict], num_classes: int, result: dict) -> list[str]:
  """Times plan.time_steps real steps of each answered row on this job's
  devices; the fastest timed becomes the plan's command (result's `timed`,
  `timed_best`). Its answers."""
  steps = config.plan.time_steps
  # Every process of the job runs the same steps together: process 0's
  # answers, which every process costed alike (a process that did not
  # stops here rather than run other programs than the rest).
  mine = [r['name'] for r in answered]
  check_same_answers(agreement.gather_json(mine) if jax.process_count() > 1 else [mine])
  # Process 0's timings, which wait for the others' at each step's
  # collectives, are the answer's.
  timed = mesh_timing.time_configurations(config, answered, steps, num_classes)
  fastest = min(answered, key=lambda r: timed[r['name']]['step_s'])
  result['timed'] = timed
  result['timed_best'] = fastest['name']
  result['command'] = _command(fastest)
  each = ', '.join(f'{r["name"]} {timed[r["name"]]["step_s"] * 1e3:.4g} ms (predicted '
                   f'{r["step_s"] * 1e3:.4g})' for r in answered)
  lines = [f'timed, {steps} steps each on these devices: {each}',
           f'fastest when timed: {fastest["name"]}']
  if fastest is not answered[0]:
    lines.append(f'run it: {result["command"]}')
  return lines


def _write(workdir: str, result: dict) -> None:
  if jax.process_index() != 0:  # the same plan on every process: one writes it
    return
  path = os.path.join(workdir, PLAN_FILE)
  with open(path + '.tmp', 'w') as f:
    json.dump(result, f, indent=1)
  os.replace(path + '.tmp', path)
  logging.info('Wrote %s', path)
