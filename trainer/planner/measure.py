"""What the planner measures on the devices at hand.

Only these figures feed its predictions: the model's bytes S, the compute
time T_C of the workers' gradient program at each per-worker batch (run by
N_w workers at once, since emulated devices share the host's cores), the
host<->device copy speed, the shards' aggregate-and-update time, the host's
own work of moving a direction's bytes (on unlimited links) and the fixed
hand-offs of a step. It never looks at the parameter-server engine's step
times.
"""

from concurrent import futures
import dataclasses
import time

from absl import logging
import jax
import numpy as np

from trainer import memory
from trainer import mfu
from trainer import optim
from trainer import progress
from trainer import state as state_lib
from trainer import timing
from trainer import units
from trainer.engines.emulation import link
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers
from trainer.engines.ps import cluster as cluster_lib
from trainer.engines.ps import partition
from trainer.engines.ps import state_split
from trainer.planner import allreduce_timer


@dataclasses.dataclass
class ComputePoint:
  per_worker_batch: int
  compute_s: float | None  # median wall time of the gradient program (None: not run)
  images_per_sec: float | None  # N_w * b / T_C
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
    return timing.median_s(lambda: jax.block_until_ready(
        self.program(self.vector, self._batch, self._step)), repeats)


def compute_sweep(exp, num_workers: int, per_worker_batches, repeats: int,
                  capacity_bytes: int | None) -> list[ComputePoint]:
  """T_C(b), XLA's FLOPs and peak memory for each per-worker batch b that
  fits, in increasing order. repeats=0: compiled, not run (the FLOPs and
  memory alone, for a cluster whose T_C comes from its own devices)."""
  vector = None  # the initial variables, made once for every batch size
  points = []
  batches = sorted(per_worker_batches)
  logging.info('Plan sweep: %d per-worker batch sizes on %d workers, each '
               'compiled%s', len(batches), num_workers,
               f', then timed {repeats} times' if repeats else '')
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
    t = timer.median_s(repeats) if repeats else None
    points.append(ComputePoint(b, t, num_workers * b / t if t else None, peak,
                               mfu.xla_flops(timer.program)))
    logging.info('Plan sweep: %s: per-worker batch %d, %.2f GFLOP, %.2f GiB%s',
                 progress.done_line('batch size', i + 1, len(batches),
                                    time.perf_counter() - started),
                 b, points[-1].flops / 1e9, peak / 2**30,
                 f', T_C {t:.4f} s, {num_workers * b / t:.1f} images/s' if t else '')
  return points


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
  off = timing.median_s(lambda: np.asarray(jax.device_get(on_device)), repeats)
  on = timing.median_s(lambda: jax.block_until_ready(
      jax.device_put(staging, device, may_alias=False)), repeats)
  def copy_out():
    for path, view in layout.views(host).items():
      np.copyto(buffers[path], view)
  def copy_in():
    for path, view in layout.views(staging).items():
      np.copyto(view, buffers[path])
  return {'device_s': off + on,
          'per_direction_s': max(timing.median_s(copy_out, repeats), timing.median_s(copy_in, repeats))}


def update_s(exp, num_workers: int, num_shards: int, repeats: int = 3) -> float:
  """Wall time of every shard averaging N_w gradients and updating at once."""
  timer = HostTimer(exp, num_workers, num_shards)
  try:
    return timer.update_s(repeats)
  finally:
    timer.close()


class HostTimer:
  """The host's own work of a synchronous PS step, for N_w workers and N_ps
  shards, built once (the shards' programs compiled) and timed on demand:
  the study times it just before and just after each cell, as T_C.

  It runs the parameter-server engine's own shards and transfers
  (trainer/engines/ps/cluster.py) on unlimited links, so what it times is
  the host's work without the bandwidth: the per-piece copies, the
  messages' hand-offs between threads and the contention of N_w * N_ps
  transfers for the host's cores.
  """

  def __init__(self, exp, num_workers: int, num_shards: int):
    config = exp.config.copy_and_resolve_references()
    config.network.num_workers = num_workers
    config.network.bandwidth_gbps = 0.0  # unlimited: the host's work alone
    config.network.latency_ms = 0.0
    config.ps.num_shards = num_shards
    exp = dataclasses.replace(exp, config=config)
    tx = optim.create_optimizer(config, exp.learning_rate_fn, clip=False)
    self._cluster = cluster_lib.Cluster(exp, cluster_lib.topology(exp), tx)
    host = jax.device_get(state_lib.create_train_state(
        exp.model, exp.tx, config.data.image_size, exp.state_shardings, config.seed))
    self._cluster.load(host)
    for s in self._cluster.shards:
      s.received.fill(1e-3)  # gradients to average until a push lands
    self._layout = self._cluster.layout
    self._gradients = self._layout.pack_host(host.params, host.batch_stats)
    self._num_workers, self._num_shards = num_workers, num_shards
    # The engine's task threads: one round of tasks per phase of the step.
    self._tasks = futures.ThreadPoolExecutor(max(num_workers, num_shards))
    self._devices = devices = self._cluster.devices
    mesh = workers.worker_mesh(devices)
    self._replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    self._metrics = jax.device_put(  # one loss and accuracy per worker
        {'loss': np.zeros(num_workers, np.float32),
         'accuracy': np.zeros(num_workers, np.float32)},
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(workers.AXIS)))
    self._pulled = [jax.device_put(np.zeros(1, np.float32), d) for d in devices]
    self._on_devices = [jax.device_put(self._gradients, d) for d in devices]
    self._staging = [self._layout.empty() for _ in devices]

  def _round(self, fn, count: int) -> None:
    list(self._tasks.map(fn, range(count)))

  def update_s(self, repeats: int) -> float:
    """Every shard averaging the N_w gradients, then every shard updating."""
    shards = self._cluster.shards
    def update():
      self._round(lambda j: shards[j].aggregate(), self._num_shards)
      self._round(lambda j: shards[j].apply(1.0, True), self._num_shards)
    return timing.median_s(update, repeats)

  def push_s(self, repeats: int) -> float:
    """Every worker at once sending its pieces to every shard."""
    gradients, layout = self._gradients, self._layout
    return timing.median_s(lambda: self._round(
        lambda i: self._cluster.push(i, layout.views(gradients)), self._num_workers), repeats)

  def pull_s(self, repeats: int) -> float:
    """Every worker at once receiving every shard's pieces into a fresh
    staging vector (as the engine's pull does)."""
    layout = self._layout
    return timing.median_s(lambda: self._round(
        lambda i: self._cluster.pull(i, layout.views(layout.empty())), self._num_workers),
        repeats)

  def device_copies_s(self, repeats: int) -> float:
    """Every worker at once copying its gradients off its device (before
    the push), then every worker its pulled variables onto it (after the
    pull)."""
    def copies():
      self._round(lambda i: np.asarray(jax.device_get(self._on_devices[i])),
                  self._num_workers)
      self._round(lambda i: jax.block_until_ready(jax.device_put(
          self._staging[i], self._devices[i], may_alias=False)), self._num_workers)
    return timing.median_s(copies, repeats)

  def bookkeeping_s(self, repeats: int) -> float:
    """A step's fixed hand-offs, whatever the model's size: the four rounds
    of tasks (compute and push, aggregate, update, pull), the step number
    put on every worker, the workers' metrics fetched, and the pulled
    vectors joined into one array."""
    def bookkeeping():
      jax.block_until_ready(jax.device_put(np.int32(0), self._replicated))
      for count in (self._num_workers, self._num_shards, self._num_shards,
                    self._num_workers):
        self._round(lambda k: k, count)
      jax.device_get(self._metrics)
      jax.make_array_from_single_device_arrays((1,), self._replicated, self._pulled)
    return timing.median_s(bookkeeping, repeats)

  def median_s(self, repeats: int) -> dict:
    """Each of the above, timed now: {'update_s', 'push_s', 'pull_s',
    'device_copies_s', 'bookkeeping_s'}."""
    return {'update_s': self.update_s(repeats), 'push_s': self.push_s(repeats),
            'pull_s': self.pull_s(repeats), 'device_copies_s': self.device_copies_s(repeats),
            'bookkeeping_s': self.bookkeeping_s(repeats)}

  def close(self) -> None:
    self._tasks.shutdown()
    self._cluster.close()


def link_chunk_bytes(bandwidth_gbps: float) -> int:
  """The bytes the emulated link copies before it books them (link.py's
  chunk at this bandwidth); 0 for an unlimited link."""
  return link.chunk_bytes(units.gbps_to_bytes_per_s(bandwidth_gbps))


def largest_shard_bytes(exp, num_shards: int) -> int:
  variables = state_split.flat_variables(exp.abstract_state.params,
                                         exp.abstract_state.batch_stats)
  return max(partition.shard_bytes(
      partition.partition(variables, num_shards, exp.config.ps.partitioner)))


def capacity(exp) -> int | None:
  return memory.device_capacity(exp.config.runtime.device_memory_gib)


# The all-reduce engine's host work, beside HostTimer's for PS (the study
# takes both from this module).
AllReduceHostTimer = allreduce_timer.AllReduceHostTimer
