"""What the planner measures on the devices at hand.

Only these figures feed its predictions: the model's bytes S, the compute
time T_C of the workers' gradient program at each per-worker batch (run by
N_w workers at once, since emulated devices share the host's cores), the
host<->device copy speed, and the shards' aggregate-and-update time. It
never looks at the parameter-server engine's step times.
"""

import dataclasses
import math
import os
import time

from absl import logging
import jax
import numpy as np

from trainer import memory
from trainer import progress
from trainer import state as state_lib
from trainer.engines.ps import partition
from trainer.engines.ps import shard as shard_lib
from trainer.engines.ps import state_split
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers


@dataclasses.dataclass
class ComputePoint:
  per_worker_batch: int
  compute_s: float  # median wall time of the gradient program
  images_per_sec: float  # N_w * b / T_C
  peak_bytes: int  # per device, from XLA's memory analysis
  flops: float  # one worker's FLOPs per step, from XLA's cost analysis


def reuse_compilations(directory: str) -> None:
  """Keeps compiled programs in `directory` for the rest of the process.

  A grid recompiles the same workers' program for every shard count and
  link (it depends on the model, N_w and the batch only); with the cache
  each is compiled once.
  """
  jax.config.update('jax_compilation_cache_dir', directory)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)


def model_bytes(exp) -> int:
  """S: the bytes a worker pushes and pulls per step (parameters' gradients
  and batch statistics)."""
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(
      (exp.abstract_state.params, exp.abstract_state.batch_stats)))


def _median_s(fn, repeats: int) -> float:
  fn()  # warm-up
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def _layout(exp) -> wire.Layout:
  return wire.Layout(state_split.flat_variables(exp.abstract_state.params,
                                                exp.abstract_state.batch_stats))


def _initial_vector(exp, layout) -> np.ndarray:
  """The model's initial variables as a worker receives them (wire.py)."""
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, exp.config.data.image_size, exp.state_shardings,
      exp.config.seed))
  return layout.pack_host(state.params, state.batch_stats)


class ComputeTimer:
  """The workers' gradient program for N_w workers, compiled for one
  per-worker batch, with its inputs on the devices: timed on demand (the
  study times it before and after each cell without compiling it again)."""

  def __init__(self, exp, num_workers: int, per_worker_batch: int, vector=None):
    devices = jax.devices()[len(jax.devices()) - num_workers:]
    mesh = workers.worker_mesh(devices)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    if vector is None:
      vector = jax.device_put(_initial_vector(exp, _layout(exp)), replicated)
    self.vector = vector  # the workers' variables (wire.py), replicated
    global_batch, size = per_worker_batch * num_workers, exp.config.data.image_size
    self.program = workers.compile_sync_program(exp, mesh, _layout(exp),
                                                batch_size=global_batch)
    rng = np.random.default_rng(per_worker_batch)
    self._batch = jax.device_put({
        'image': rng.integers(0, 256, (global_batch, size, size, 3), np.uint8),
        'label': rng.integers(0, 2, (global_batch,), np.int32)},
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(workers.AXIS)))
    self._step = jax.device_put(np.int32(0), replicated)

  def median_s(self, repeats: int) -> float:
    return _median_s(lambda: jax.block_until_ready(
        self.program(self.vector, self._batch, self._step)), repeats)


def compute_sweep(exp, num_workers: int, per_worker_batches, repeats: int,
                  capacity_bytes: int | None) -> list[ComputePoint]:
  """T_C(b) for each per-worker batch b that fits, in increasing order."""
  vector = None  # the initial variables, made once for every batch size
  points = []
  batches = sorted(per_worker_batches)
  logging.info('Plan sweep: %d per-worker batch sizes on %d workers, each '
               'compiled, then timed %d times', len(batches), num_workers, repeats)
  for i, b in enumerate(batches):
    started = time.perf_counter()
    timer = ComputeTimer(exp, num_workers, b, vector)
    vector = timer.vector
    peak = memory.report(timer.program, exp.abstract_state).peak
    if capacity_bytes is not None and peak > capacity_bytes:
      logging.info('Plan sweep: per-worker batch %d needs %.2f GiB per device, '
                   'more than the %.2f GiB there: the sweep stops', b,
                   peak / 2**30, capacity_bytes / 2**30)
      break  # larger batches need more memory still
    t = timer.median_s(repeats)
    points.append(ComputePoint(b, t, num_workers * b / t, peak,
                               worker_flops(timer.program)))
    logging.info('Plan sweep: %s: per-worker batch %d, T_C %.4f s, %.1f images/s',
                 progress.done_line('batch size', i + 1, len(batches),
                                    time.perf_counter() - started),
                 b, t, num_workers * b / t)
  return points


def worker_flops(program) -> float:
  """One worker's FLOPs of a step of the compiled workers' program (XLA's
  cost analysis is per device: each worker is one)."""
  cost = program.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0]
  return float(cost.get('flops', 0.0))


def host_copies_s(exp, repeats: int = 5) -> dict:
  """One worker's host-side copies of a step, as the engine makes them.

  device_s: its wire vector off the device and back onto it, before the
  push and after the pull. per_direction_s: each variable into the shards'
  buffers, or back (so per-variable overheads count); the link carries
  those bytes while they are copied.
  """
  device = jax.devices()[-1]
  layout = _layout(exp)
  host = _initial_vector(exp, layout)
  on_device = jax.device_put(host, device)
  staging, buffers = layout.empty(), {p: np.empty_like(v) for p, v in
                                      layout.views(host).items()}
  off = _median_s(lambda: np.asarray(jax.device_get(on_device)), repeats)
  on = _median_s(lambda: jax.block_until_ready(
      jax.device_put(staging, device, may_alias=False)), repeats)
  def copy_out():
    for path, view in layout.views(host).items():
      np.copyto(buffers[path], view)
  def copy_in():
    for path, view in layout.views(staging).items():
      np.copyto(view, buffers[path])
  return {'device_s': off + on,
          'per_direction_s': max(_median_s(copy_out, repeats), _median_s(copy_in, repeats))}


def update_s(exp, num_workers: int, num_shards: int, repeats: int = 3) -> float:
  """Wall time of every shard averaging N_w gradients and updating at once."""
  variables = state_split.flat_variables(exp.abstract_state.params,
                                         exp.abstract_state.batch_stats)
  pieces = partition.partition(variables, num_shards, exp.config.ps.partitioner)
  from trainer import optim  # pylint: disable=g-import-not-at-top
  tx = optim.create_optimizer(exp.config, exp.learning_rate_fn, clip=False)
  shards = [shard_lib.ServerShard(j, p, tx, num_workers, bandwidth_gbps=0.0,
                                  latency_ms=0.0) for j, p in enumerate(pieces)]
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, exp.config.data.image_size, exp.state_shardings,
      exp.config.seed))
  treedef = jax.tree.structure(state.params)
  for s in shards:
    s.load(state.params, state.batch_stats, state.opt_state, treedef)
    s.received.fill(1e-3)
  threads = min(num_shards, os.cpu_count() or 1)
  from concurrent import futures  # pylint: disable=g-import-not-at-top
  with futures.ThreadPoolExecutor(threads) as pool:
    def once():
      list(pool.map(lambda s: s.aggregate(), shards))
      list(pool.map(lambda s: s.apply(1.0, True), shards))
    return _median_s(once, repeats)


def largest_shard_bytes(exp, num_shards: int) -> int:
  variables = state_split.flat_variables(exp.abstract_state.params,
                                         exp.abstract_state.batch_stats)
  return max(partition.shard_bytes(
      partition.partition(variables, num_shards, exp.config.ps.partitioner)))


def capacity(exp) -> int | None:
  return memory.device_capacity(exp.config.runtime.device_memory_gib)


def gbps_to_bytes_per_s(gbps: float) -> float:
  return gbps * 1e9 / 8 if gbps > 0 else math.inf
