"""The synchronous parameter-server engine: push, aggregate and update, pull.

A step:
  1. compute: every worker device runs forward and backward on its slice of
     the global batch with its own copy of the parameters (workers.py);
  2. push: each worker's gradients leave its device and cross its link to
     every shard that owns a piece of them (link.py paces the bytes);
  3. update: each shard averages the N_w gradients of its pieces and applies
     the optax update to them (shard.py): SPMD data parallelism's update;
  4. pull: each worker receives the fresh pieces from every shard over the
     links and puts them on its device.
With ps.overlap, each parameter's gradient leaves during backprop: step 2
runs inside step 1.

Every time recorded here is measured wall clock; nothing is computed from a
formula, so the planner's predictions can be checked against it.

Failures: whatever a thread of the engine raises ends the step that waits
for it with an EngineThreadFailed naming the thread and the cause, and
close() fails loudly if a thread does not end (threads.py).
"""

import concurrent.futures
import math
import time

from absl import logging
import jax
import numpy as np

from core.errors import UsageError
from trainer import optim
from trainer.engines.emulation import link
from trainer.engines.emulation import network as network_lib
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.emulation import threads
from trainer.engines.emulation import workers
from trainer.engines.ps import cluster as cluster_lib
from trainer.engines.emulation.wire import PARAMS
from trainer.state import TrainState


def _check_overlap_devices(config) -> None:
  """UsageError when ps.overlap cannot work on these devices."""
  devices = jax.devices()
  n = network_lib.num_workers(config.network, len(devices))
  if devices[0].platform == 'cpu' and n == len(devices):
    # XLA hands a gradient to the host by placing it on the first CPU
    # device, which waits behind that device's own running step.
    raise UsageError(
        'ps.overlap on CPU devices needs one device that is not a worker, '
        'where gradients reach the host during backprop: set '
        'network.num_workers below the device count (emulate more devices with '
        'XLA_FLAGS=--xla_force_host_platform_device_count=N if needed)')


class SyncParameterServerEngine:
  """One aggregated update per step, the update of SPMD data parallelism."""

  def __init__(self, exp):
    config = exp.config
    self._exp = exp
    self._overlap = config.ps.overlap
    if self._overlap:
      _check_overlap_devices(config)
    network = NetworkSpec.from_config(config.network, jax.device_count())
    topology = cluster_lib.placement(exp, network.num_workers, config.ps.num_shards,
                                     config.ps.partitioner)
    self.batch_sharding = topology.batch_sharding
    self.step_phases = cluster_lib.STEP_PHASES
    self._replicated = jax.sharding.NamedSharding(topology.mesh, jax.P())

    # The workers' program first: a run whose workers do not fit their
    # devices stops here, before the shards compile and before anything is
    # written.
    start = time.perf_counter()
    self._program = workers.compile_sync_program(
        exp, topology.mesh, topology.layout,
        self._send_gradient if self._overlap else None)
    workers.check_memory(exp, self._program, topology.layout)
    compile_s = time.perf_counter() - start

    # The shards clip with the global norm of the mean gradient, as SPMD
    # does, so their optax chain holds an identity where clipping was.
    self.cluster = cluster_lib.Cluster(
        exp, topology, optim.create_optimizer(config, exp.learning_rate_fn, clip=False),
        network)
    n, prefix = self.cluster.num_workers, self.cluster.thread_prefix
    self._tasks = concurrent.futures.ThreadPoolExecutor(
        max(n, self.cluster.num_shards), thread_name_prefix=f'{prefix}task')
    # ps.overlap: each parameter's gradient is sent the moment backprop has
    # made it, one message per variable on a per-(worker, shard) connection
    # that keeps the messages in order.
    self._param_paths = topology.layout.paths[:topology.layout.num_params]
    self._connections = [
        [concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f'{prefix}connection{i}-{j}')
         for j in range(self.cluster.num_shards)]
        for i in range(n)] if self._overlap else []
    self._in_flight = [[] for _ in range(n)]
    # Each worker pulls into the same host vector every step (its device
    # copy is taken before the next pull): a fresh one per step is memory
    # the kernel faults in again, step after step.
    self._staging = [self.cluster.layout.empty() for _ in range(n)]

    logging.info('Compiled the PS workers\' gradient program in %.1fs; %s',
                 compile_s, self.cluster.describe())
    self._step = 0
    self._failure = None  # the first failure of a step's thread
    self._records = []
    self._worker_vectors = None  # each worker's variables, on its device

  # --- Engine interface -------------------------------------------------------
  def start(self, state: TrainState, meta: dict | None = None) -> None:
    del meta  # the state is all a synchronous engine needs
    host = jax.device_get(state)
    self._step = int(host.step)
    self.cluster.load(host)
    # The workers' first copies; later ones are pulled over the links.
    vector = self.cluster.layout.pack_host(host.params, host.batch_stats)
    self._worker_vectors = workers.from_pieces(
        [jax.device_put(vector, d) for d in self.cluster.devices], self._replicated)

  def step(self, batch) -> None:
    self._records.append(self._sync_step(batch))
    self._step += 1

  def collect_metrics(self) -> list[dict]:
    records, self._records = self._records, []
    return records

  def state(self) -> TrainState:
    return self.cluster.state(self._step)

  def checkpoint_meta(self) -> dict:
    return {}

  def close(self) -> None:
    """Stops every thread of the engine; RunFailure if one does not end."""
    # Nothing queued is run; what is running ends with its current task.
    for pool in [self._tasks, *sum(self._connections, [])]:
      pool.shutdown(wait=False, cancel_futures=True)
    self.cluster.close(self._failure)

  # --- The step -----------------------------------------------------------------
  def _in_tasks(self, what: str, fn, count: int) -> list:
    """[fn(k) for k < count], run in the task threads; a failure of any,
    BaseException included, raises EngineThreadFailed naming what.format(k)."""
    try:
      return list(self._tasks.map(
          lambda k: threads.guarded(what.format(k), fn)(k), range(count)))
    except threads.EngineThreadFailed as e:
      self._failure = e  # for close() to name, should a thread then not stop
      raise

  def _sync_step(self, batch) -> dict:
    cluster = self.cluster
    start = time.perf_counter()
    step = self._step
    vectors, metrics = self._program(
        self._worker_vectors, batch, jax.device_put(np.int32(step), self._replicated))
    per_worker = [workers.local_shard(vectors, d) for d in cluster.devices]
    pushed = self._in_tasks(
        'parameter-server worker {} (compute and push)',
        lambda i: self._compute_and_push(i, per_worker[i], start), cluster.num_workers)
    compute_s = [c for c, _ in pushed]
    push_s = [p for _, p in pushed]

    update_start = time.perf_counter()
    metrics = jax.device_get(metrics)
    grad_norm = math.sqrt(sum(self._in_tasks(
        'parameter-server shard {} (aggregate)',
        lambda j: cluster.shards[j].aggregate(), cluster.num_shards)))
    loss = float(np.mean(metrics['loss']))
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    scale = cluster_lib.clip_scale(grad_norm, self._exp.config.grad_clip_norm)
    apply = finite or self._exp.config.nonfinite != 'skip'
    self._in_tasks('parameter-server shard {} (update)',
                   lambda j: cluster.shards[j].apply(scale, apply), cluster.num_shards)
    update_s = time.perf_counter() - update_start

    pulled = self._in_tasks('parameter-server worker {} (pull)', self._timed_pull,
                            cluster.num_workers)
    self._worker_vectors = workers.from_pieces([v for v, _ in pulled], self._replicated)
    pull_s = [t for _, t in pulled]
    step_s = time.perf_counter() - start
    busy = (np.mean(compute_s) + np.mean(push_s) + update_s + np.mean(pull_s))
    return {
        'loss': loss,
        'accuracy': float(np.mean(metrics['accuracy'])),
        'lr': float(self._exp.learning_rate_fn(step)),
        'grad_norm': grad_norm,
        'finite': float(finite),
        'compute_s': float(np.mean(compute_s)),
        'push_s': float(np.mean(push_s)),
        'update_s': update_s,
        'pull_s': float(np.mean(pull_s)),
        'wait_s': float(max(0.0, step_s - busy)),
        **cluster.shard_counters(step_s),
    }

  def _compute_and_push(self, i: int, local: jax.Array, start: float):
    """Waits for worker i's gradients and statistics, then pushes them
    (with overlap: the statistics, and waits for the gradients in flight)."""
    jax.block_until_ready(local)
    computed = time.perf_counter()
    flat = self.cluster.layout.views(np.asarray(jax.device_get(local))[0])
    if self._overlap:  # the gradients are on their way already
      flat = {p: v for p, v in flat.items() if not p.startswith(PARAMS + '/')}
    self.cluster.push(i, flat)
    if self._overlap:
      in_flight, self._in_flight[i] = self._in_flight[i], []
      link.wait_until(max([f.result() for f in in_flight], default=0.0))
    return computed - start, time.perf_counter() - computed

  def _send_gradient(self, worker, leaf, gradient) -> None:
    """Called by XLA on the host during backprop (ps.overlap): sends one
    parameter's gradient to the shards that own it, without waiting."""
    worker, path = int(worker), self._param_paths[int(leaf)]
    gradient = np.array(gradient)  # XLA's buffer is only lent to the callback
    for j in self.cluster.owners(path):
      self._in_flight[worker].append(self._connections[worker][j].submit(
          self.cluster.send, worker, j, {path: gradient}))

  def _timed_pull(self, i: int):
    start = time.perf_counter()
    vector = self.cluster.pull_to_device(i, self._staging[i])
    return vector, time.perf_counter() - start
