"""The host's own work of a synchronous parameter-server step, timed for
the planner and the study: the engine's own shards and transfers on
unlimited links. None of it looks at the engine's step times.
"""

from concurrent import futures

import jax
import numpy as np

from core import timing
from trainer import optim
from trainer import state as state_lib
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.ps import cluster as cluster_lib
from trainer.engines.ps import partition


class HostTimer:
  """The host's own work of a synchronous PS step, for N_w workers and N_ps
  shards, built once (the shards' programs compiled) and timed on demand:
  the study times it just before and just after each cell, as T_C.

  It runs the parameter-server engine's own shards and transfers
  (cluster.py) on unlimited links, so what it times is
  the host's work without the bandwidth: the per-piece copies, the
  messages' hand-offs between threads and the contention of N_w * N_ps
  transfers for the host's cores.
  """

  def __init__(self, exp, num_workers: int, num_shards: int):
    config = exp.config
    tx = optim.create_optimizer(config, exp.learning_rate_fn, clip=False)
    placement = cluster_lib.placement(exp, num_workers, num_shards, config.ps.partitioner)
    # Unlimited links: the host's work alone.
    self._cluster = cluster_lib.Cluster(exp, placement, tx,
                                        NetworkSpec(num_workers).unlimited())
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
    """Every worker at once receiving every shard's pieces into its staging
    vector (as the engine's pull does)."""
    layout = self._layout
    return timing.median_s(lambda: self._round(
        lambda i: self._cluster.pull(i, layout.views(self._staging[i])), self._num_workers),
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


def largest_shard_bytes(exp, num_shards: int) -> int:
  variables = wire.flat_variables(exp.abstract_state.params,
                                         exp.abstract_state.batch_stats)
  return max(partition.shard_bytes(
      partition.partition(variables, num_shards, exp.config.ps.partitioner)))
