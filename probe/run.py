"""--mode=probe: measure the network and the devices at hand; write probe.json.

Launched like training (one process, launch.py, SLURM, by hand), every
process takes part; only process 0 writes WORKDIR/probe.json, atomically,
replacing an earlier one, and prints its summary (probe/report.py). Nothing
else stays in the work dir (run.lock only while it runs). docs/probe.md is
the user's guide; this docstring is the schema.

probe.json (schema_version 2). Units are in the names: `_s` seconds,
`_bytes` bytes, `_gbps` Gbit/s (10^9 bits per second), `_bytes_per_s`.
A figure that cannot be had is null, never absent.

- schema_version: 2.
- provenance: date (UTC, ISO 8601), commit (git HEAD, "-dirty" when tracked
  files differ), command (argv), platform, device_kind, process_count,
  device_count, devices_per_process [by process index], host_names [by
  process index], cpu_model, cpu_count, memory_gib (process 0's machine),
  environment (XLA_FLAGS, NCCL_* ... when set).
- model: name, width, depth, image_size, dtype (resolved), num_classes,
  parameter_bytes (float32 parameters: the bytes of one gradient
  all-reduce).
- hosts: grouping ('process' or 'hostname', probe.host_grouping resolved),
  why (one sentence), processes_by_host [[process index, ...] by host],
  devices_per_host [by host].
- settings: message_bytes [the sizes timed], repeats, ops_per_call,
  step_repeats, input_batches.
- configured: link_bandwidth_gbps (plan.link_bandwidth_gbps),
  intra_host_gbps (plan.intra_host_gbps; null: 0, unlimited).
- collectives: {intra_host, inter_host, all_devices}, each either
  {measured: false, reason} or
  {measured: true, participants (p), configured_gbps (intra_host: the
  configured intra-host rate; the others: the link's), all_reduce,
  all_gather}, each op:
    points: [{message_bytes (what each device holds at the end, as
      nccl-tests counts it), time_s (one collective: the slowest
      participating process's median), time_s_by_process [null where the
      process takes no part], algbw_gbps, busbw_gbps}],
    latency_s, algbw_bytes_per_s, algbw_gbps, busbw_gbps (fitted:
      t = latency_s + message_bytes / algbw_bytes_per_s, least squares of
      relative residuals, probe/fit.py; null bandwidth: the time did not grow
      with size), bus_factor (busbw / algbw: 2(p-1)/p for all_reduce,
      (p-1)/p for all_gather), busbw_over_configured (null: no configured
      rate), max_relative_residual.
  Levels (probe/hosts.py): intra_host: each host's devices, every host at
  once; inter_host: one device per host; all_devices: every device in one
  collective.
- step_fixed_cost: what a step pays beyond its compute and its bytes
  (probe/step_cost.py): tiny_model {inputs, hidden, classes},
  per_device_batch, participants, points [{operands (the arrays of its
  all-reduce), gradient_bytes, all_devices_step_s and one_device_step_s
  (slowest process's median) with their _by_process lists, extra_s =
  all_devices_step_s - one_device_step_s}], fixed_cost_s and per_operand_s
  (fitted: extra_s = fixed_cost_s + operands * per_operand_s, least squares
  of relative residuals, both >= 0; 0 with one device in all),
  max_relative_residual (null with one device); mean_array_bytes (of the
  tiny model's largest step); by_array_bytes [{array_bytes, point (a step
  of step_cost.EQUAL_ARRAYS arrays that all hold array_bytes, as points
  above), per_operand_s = (its extra_s - fixed_cost_s) / its arrays, >= 0;
  0 with one device}] at each of step_cost.ARRAY_BYTES.
- mesh_collectives: null (probe.mesh_collectives=false, or hosts of
  unequal sizes, on which no mesh lies) or each
  collective of a sharded step timed inside a program on the device groups
  of a mesh's axes (probe/mesh_collectives.py): what, ops_per_call, points
  [{op, group_size, stride, level ('inside a host' | 'across hosts'),
  message_bytes (each device's result), operands (arrays given to the one
  collective), hlo_operands (the arrays its HLO holds), time_s (one
  collective: the slowest process's median), time_s_by_process}], fits
  {'<op> <level> <group_size>': {latency_s, seconds_per_byte,
  per_operand_s, hlo_operands}}.
- compute: what (one sentence), devices_per_process, capacity_bytes (per
  device; null: not known, every batch tried), points [{per_device_batch,
  compute_s (slowest process's median), compute_s_by_process,
  tree_compute_s (the same gradients with the parameters as their tree,
  as an SPMD step holds them, not packed on the wire: what a mesh plan
  costs compute from), tree_compute_s_by_process,
  images_per_sec_per_device, peak_bytes, flops (XLA's count of the
  program)}], largest_fitting_batch,
  stopped_by_memory (probe/compute.py).
- update: what, update_s (the optimiser's update of the model's parameters,
  every device at once; slowest process's median), update_s_by_process.
- step_program: null (no batch fits) or the SPMD train step over every
  device, compiled at the smallest fitting per-device batch and never run
  (probe/step_program.py): per_device_batch, mesh, count (its collectives),
  operands (the arrays they combine), bytes (their results' bytes, summed),
  by_op {op: {count, operands, bytes}}, arrays_by_bytes [[bytes, how
  many arrays of that size]].
- host_input: {measured: false, reason} or {measured: true, data_source,
  images_per_sec (the slowest process's), cpu_ms_per_image (the costliest),
  images_per_sec_per_core, host_cores (the fewest), *_by_process lists,
  devices_images_per_sec (what one process's devices take at the
  compute's fastest batch), host_cores_needed, input_bound, verdict}.
- elapsed_s: the probe's wall time, start-up of the runtime excluded.
"""

import json
import os
import time

from absl import logging
import jax
import ml_collections
import numpy as np

from coordination import agreement
from coordination import workdir_lock
from core import atomic
from core import units
from core.errors import UsageError
from probe import collectives
from probe import compute
from probe import fit as fit_lib
from probe import hosts as hosts_lib
from probe import input_rate
from probe import mesh_collectives
from probe import processes
from probe import provenance
from probe import report
from probe import settings
from probe import step_cost
from probe import step_program
from trainer import experiment
from trainer import host_input
from trainer import memory

SCHEMA_VERSION = 2
RESULT_FILE_NAME = 'probe.json'
_MIN_EXTRA_S = 1e-7  # the least extra time of a step on every device fitted
_GROUPING_WHY = {
    'process': ("each process's devices form a host: on CPU, processes exchange "
                "collectives over gloo's sockets even on one machine, as separate "
                'machines would'),
    'hostname': 'the processes that report one host name form a host',
}


def run_probe(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Measures, writes WORKDIR/probe.json (process 0) and returns the record."""
  real_data = config.data.source != 'synthetic'
  if real_data:
    # pylint: disable-next=g-import-not-at-top
    from input_pipeline import check_data_config
    check_data_config(config.data)  # before the work dir is touched
    if config.batch_size % jax.process_count():
      raise UsageError(f'batch_size={config.batch_size} must be divisible by the '
                       f'{jax.process_count()} processes, each of which reads its share')
  agreement.check_same_run(config)
  # Beside another run of this work dir the devices would be shared and
  # the times wrong.
  with workdir_lock.hold(workdir, 'probe', process_index=jax.process_index(),
                         process_count=jax.process_count()):
    record = _measure(config)
    if jax.process_index() == 0:
      path = os.path.join(workdir, RESULT_FILE_NAME)
      atomic.write_text(path, json.dumps(record, indent=1) + '\n')
      print(report.summary(record, path), flush=True)
  return record


def _model_experiment(config, data):
  """(experiment, number of classes): the configured model, optimiser and
  state layout. The run's mesh and engine do not matter to the probe: it
  measures each device's own compute."""
  config = config.copy_and_resolve_references()
  config.engine = 'spmd'
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = -1, 1, 1
  config.mesh.shard_update = False
  if data is not None:
    num_classes = experiment.resolve_num_classes(config, data)
  else:
    num_classes = config.model.num_classes or config.data.num_synthetic_classes
  return experiment.build_without_data(config, num_classes), num_classes


def _measure(config) -> dict:
  start = time.perf_counter()
  me = jax.process_index()
  devices = jax.devices()
  data = input_rate.dataset(config)
  exp, num_classes = _model_experiment(config, data)
  parameter_bytes = memory.global_bytes(exp.abstract_state.params)

  host_facts = processes.gather(provenance.this_host())
  grouping = hosts_lib.resolve_grouping(config.probe.host_grouping, devices[0].platform)
  topology = hosts_lib.topology(devices, [h['host_name'] for h in host_facts], grouping)
  levels = [l for l in hosts_lib.LEVELS if topology.skipped(l) is None]
  sizes = settings.message_sizes(
      config.probe.min_message_bytes, config.probe.max_message_bytes or parameter_bytes,
      config.probe.num_sizes,
      settings.participant_multiple(topology.participants(l) for l in levels))
  logging.info('probe: %d host(s) by %s; timing collectives at %d sizes, %d to %d bytes',
               len(topology.hosts), grouping, len(sizes), sizes[0], sizes[-1])

  mine = {'collectives': _time_collectives(config.probe, topology, levels, sizes, me)}
  logging.info('probe: timing the fixed cost of a step')
  mine['step'] = _time_step(config.probe.step_repeats)
  # A mesh lies on hosts of equal size (planner/mesh_from_probe.py).
  mesh_collectives_timed = (config.probe.mesh_collectives and
                            len({len(h) for h in topology.hosts}) == 1)
  if mesh_collectives_timed:
    logging.info('probe: timing each collective on the device groups of a mesh')
    mine['mesh_collectives'] = mesh_collectives.time_all(
        [d for host in topology.hosts for d in host], len(topology.hosts[0]),
        config.probe.repeats, config.probe.ops_per_call)
  capacity = memory.device_capacity(config.runtime.device_memory_gib)
  logging.info('probe: timing %s on each device', config.model.name)
  mine['compute'] = compute.sweep(exp, jax.local_devices(), settings.per_device_batches(config),
                                  config.probe.repeats, capacity)
  logging.info('probe: timing the optimiser update on each device')
  mine['update_s'] = compute.update_s(exp, jax.local_devices(), config.probe.repeats)
  if data is not None:
    logging.info('probe: timing the input pipeline alone, %d batches', config.probe.input_batches)
    mine['input'] = input_rate.measure(config, data, config.probe.input_batches)
  by_process = processes.gather(mine)

  plan = config.plan
  configured = {'link_bandwidth_gbps': plan.link_bandwidth_gbps,
                'intra_host_gbps': plan.intra_host_gbps or None}
  compute_record = _compute_record(by_process, config, capacity)
  program = None
  if compute_record['points']:
    logging.info('probe: compiling the SPMD train step to count its collectives')
    program = step_program.step_collectives(
        config, compute_record['points'][0]['per_device_batch'], num_classes)
  return {
      'schema_version': SCHEMA_VERSION,
      'provenance': provenance.collect(devices, host_facts),
      'model': {'name': config.model.name, 'width': config.model.width,
                'depth': config.model.depth, 'image_size': config.data.image_size,
                'dtype': np.dtype(exp.model.dtype).name, 'num_classes': num_classes,
                'parameter_bytes': int(parameter_bytes)},
      'hosts': {'grouping': grouping, 'why': _GROUPING_WHY[grouping],
                'processes_by_host': [list(m) for m in topology.process_hosts],
                'devices_per_host': [len(h) for h in topology.hosts]},
      'settings': {'message_bytes': sizes, 'repeats': config.probe.repeats,
                   'ops_per_call': config.probe.ops_per_call,
                   'step_repeats': config.probe.step_repeats,
                   'input_batches': config.probe.input_batches},
      'configured': configured,
      'collectives': {level: _level_record(level, topology, by_process, sizes, configured)
                      for level in hosts_lib.LEVELS},
      'step_fixed_cost': _step_record(by_process),
      'mesh_collectives': (mesh_collectives.record([p['mesh_collectives'] for p in by_process],
                                                   config.probe.ops_per_call)
                           if mesh_collectives_timed else None),
      'compute': compute_record,
      'update': {'what': "the optimiser's update of the model's parameters on every device "
                         'of every process at once',
                 'update_s': max(p['update_s'] for p in by_process),
                 'update_s_by_process': [p['update_s'] for p in by_process]},
      'step_program': program,
      'host_input': _input_record(by_process, config, compute_record),
      'elapsed_s': time.perf_counter() - start,
  }


# --- Measuring (every process) -------------------------------------------------

def _time_collectives(probe, topology, levels, sizes, me) -> dict:
  """{level: {op: [this process's time per size, or None]}}; every process
  walks the same loops, meeting at each size's barrier."""
  times = {}
  for level in levels:
    devices = topology.level_devices(level, me)
    times[level] = {}
    for op in fit_lib.OPS:
      programs = (collectives.compile_all(op, devices, sizes, probe.ops_per_call)
                  if devices else [None] * len(sizes))
      times[level][op] = []
      for program in programs:
        processes.barrier()
        times[level][op].append(None if program is None else collectives.time_s(
            *program, probe.repeats, probe.ops_per_call))
      del programs  # the largest messages' buffers go before the next op's
      logging.info('probe: %s %s timed', level, op)
  return times


def _time_step(repeats: int) -> dict:
  """The tiny step (and the equal arrays' step at each of
  step_cost.ARRAY_BYTES) on every device and on this process's first
  device, at each of step_cost.OPERAND_COUNTS; every process times the
  former together."""
  def points(make, counts):
    timed = []
    for operands in counts:
      everywhere = make(jax.devices(), operands)
      alone = make(jax.local_devices()[:1], operands)
      processes.barrier()
      all_devices_s = everywhere.median_s(repeats)
      processes.barrier()
      timed.append({'all_devices_step_s': all_devices_s,
                    'one_device_step_s': alone.median_s(repeats)})
    return timed
  return {'tiny': points(step_cost.TinyStep, step_cost.OPERAND_COUNTS),
          'equal': [points(lambda devices, k, size=size: step_cost.EqualArraysStep(
              devices, k, size), (step_cost.EQUAL_ARRAYS,)) for size in step_cost.ARRAY_BYTES]}


# --- Combining the processes' figures (the same on every process) ---------------

def _slowest(values) -> float | None:
  present = [v for v in values if v is not None]
  return max(present) if present else None


def _level_record(level, topology, by_process, sizes, configured) -> dict:
  reason = topology.skipped(level)
  if reason is not None:
    return {'measured': False, 'reason': reason}
  p = topology.participants(level)
  rate = configured['intra_host_gbps' if level == 'intra_host' else 'link_bandwidth_gbps']
  entry = {'measured': True, 'participants': p, 'configured_gbps': rate}
  for op in fit_lib.OPS:
    factor = fit_lib.bus_factor(op, p)
    points = []
    for i, size in enumerate(sizes):
      mine = [process['collectives'][level][op][i] for process in by_process]
      t = _slowest(mine)
      algbw = units.bytes_per_s_to_gbps(size / t)
      points.append({'message_bytes': size, 'time_s': t, 'time_s_by_process': mine,
                     'algbw_gbps': algbw, 'busbw_gbps': algbw * factor})
    fitted = fit_lib.fit_latency_bandwidth(sizes, [q['time_s'] for q in points])
    finite = fitted.bytes_per_s != float('inf')
    algbw = units.bytes_per_s_to_gbps(fitted.bytes_per_s) if finite else None
    busbw = algbw * factor if finite else None
    entry[op] = {
        'points': points, 'latency_s': fitted.latency_s,
        'algbw_bytes_per_s': fitted.bytes_per_s if finite else None,
        'algbw_gbps': algbw, 'busbw_gbps': busbw, 'bus_factor': factor,
        'busbw_over_configured': busbw / rate if busbw is not None and rate else None,
        'max_relative_residual': fitted.max_relative_residual}
  return entry


def _step_points(timed_by_process, counts, gradient_bytes) -> list[dict]:
  """One kind of step timed at each of `counts` arrays by every process
  (`timed_by_process`: each process's list of points), the slowest
  process's time of each."""
  points = []
  for i, operands in enumerate(counts):
    everywhere = [timed[i]['all_devices_step_s'] for timed in timed_by_process]
    alone = [timed[i]['one_device_step_s'] for timed in timed_by_process]
    points.append({
        'operands': operands, 'gradient_bytes': gradient_bytes(operands),
        'all_devices_step_s': max(everywhere), 'all_devices_step_s_by_process': everywhere,
        'one_device_step_s': max(alone), 'one_device_step_s_by_process': alone,
        'extra_s': max(everywhere) - max(alone)})
  return points


def _step_record(by_process) -> dict:
  points = _step_points([p['step']['tiny'] for p in by_process], step_cost.OPERAND_COUNTS,
                        step_cost.gradient_bytes)
  several = len(jax.devices()) > 1
  fixed, per_operand, worst = 0.0, 0.0, None
  if several:
    # A step on every device never costs less than on one: less is the
    # timers' noise, kept above zero for the fit.
    fixed, per_operand, worst = fit_lib.fit_line(
        [q['operands'] for q in points], [max(q['extra_s'], _MIN_EXTRA_S) for q in points])
  by_size = []
  for i, size in enumerate(step_cost.ARRAY_BYTES):
    [point] = _step_points([p['step']['equal'][i] for p in by_process],
                           (step_cost.EQUAL_ARRAYS,), lambda k, size=size: k * size)
    # The step's fixed cost is the tiny model's fit's: the rest is its arrays'.
    arrays_s = max(point['extra_s'] - fixed, 0.0) if several else 0.0
    by_size.append({'array_bytes': size, 'point': point,
                    'per_operand_s': arrays_s / step_cost.EQUAL_ARRAYS})
  largest = max(step_cost.OPERAND_COUNTS)
  return {
      'tiny_model': {'inputs': step_cost.TINY_INPUT, 'hidden': step_cost.TINY_HIDDEN,
                     'classes': step_cost.TINY_CLASSES},
      'per_device_batch': step_cost.TINY_BATCH,
      'participants': len(jax.devices()),
      'points': points, 'fixed_cost_s': fixed, 'per_operand_s': per_operand,
      'max_relative_residual': worst,
      'mean_array_bytes': step_cost.gradient_bytes(largest) / largest,
      'by_array_bytes': by_size,
  }


def _compute_record(by_process, config, capacity) -> dict:
  # Every process kept the same batches (they agreed on what fits).
  points = []
  for i, point in enumerate(by_process[0]['compute']):
    times = [p['compute'][i]['compute_s'] for p in by_process]
    b = point['per_device_batch']
    trees = [p['compute'][i]['tree_compute_s'] for p in by_process]
    points.append({'per_device_batch': b, 'compute_s': max(times),
                   'compute_s_by_process': times, 'tree_compute_s': max(trees),
                   'tree_compute_s_by_process': trees,
                   'images_per_sec_per_device': b / max(times),
                   'peak_bytes': max(p['compute'][i]['peak_bytes'] for p in by_process),
                   'flops': point['flops']})
  tried = settings.per_device_batches(config)
  return {
      'what': ("the workers' gradient program (forward and backward, no collective, "
               'no update) on every device of every process at once'),
      'devices_per_process': len(jax.local_devices()),
      'capacity_bytes': capacity,
      'points': points,
      'largest_fitting_batch': points[-1]['per_device_batch'] if points else None,
      'stopped_by_memory': len(points) < len(tried),
  }


def _input_record(by_process, config, compute_record) -> dict:
  if config.data.source == 'synthetic':
    return {'measured': False,
            'reason': 'data.source=synthetic: no input pipeline to time'}
  inputs = [p['input'] for p in by_process]
  rate = min(i['images_per_sec'] for i in inputs)
  cpu_ms = max(i['cpu_ms_per_image'] for i in inputs)
  cores = min(i['host_cores'] for i in inputs)
  record = {
      'measured': True, 'data_source': config.data.source,
      'images_per_sec': rate, 'images_per_sec_by_process': [i['images_per_sec'] for i in inputs],
      'cpu_ms_per_image': cpu_ms,
      'cpu_ms_per_image_by_process': [i['cpu_ms_per_image'] for i in inputs],
      'images_per_sec_per_core': 1000.0 / cpu_ms,
      'host_cores': cores, 'host_cores_by_process': [i['host_cores'] for i in inputs],
      'devices_images_per_sec': None, 'host_cores_needed': None, 'input_bound': None,
      'verdict': f'{rate:,.0f} images/s at {cpu_ms:.3g} CPU-ms per image '
                 '(no batch fits the devices to compare with)',
  }
  if compute_record['points']:
    best = max(compute_record['points'], key=lambda q: q['images_per_sec_per_device'])
    demand = best['images_per_sec_per_device'] * compute_record['devices_per_process']
    record.update(
        devices_images_per_sec=demand,
        host_cores_needed=host_input.cores_needed(demand, cpu_ms),
        input_bound=host_input.images_per_sec(cores, cpu_ms) < demand,
        verdict=host_input.verdict(demand, cores, cpu_ms))
  return record
