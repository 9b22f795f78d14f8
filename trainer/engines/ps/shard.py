"""A server shard: its pieces of the parameters, batch statistics and
optimiser state in host memory, and the optax update applied to them."""

import functools
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trainer.engines.emulation import link
from trainer.engines.ps import state_split
from trainer.engines.emulation import wire
from trainer.engines.emulation.wire import PARAMS, STATS


def host_device():
  """Where shards compute: the host's CPU, even beside accelerators."""
  return jax.devices('cpu')[0]


class ServerShard:
  """Owns `pieces`; receives gradients into per-worker buffers.

  Synchronous mode: every worker's gradient lands in its own buffer, then
  `aggregate` averages them (in worker order, so runs are reproducible) and
  `apply` makes one optax update: the update of SPMD data parallelism.
  Asynchronous mode: `apply_one` applies each worker's gradient on arrival,
  under the shard's lock, with 1/N_w of the learning rate.
  """

  def __init__(self, index: int, pieces, tx, num_workers: int, *,
               bandwidth_gbps: float, latency_ms: float):
    self.index = index
    self.pieces = pieces
    self.param_pieces = [p for p in pieces if p.path.startswith(PARAMS + '/')]
    self.stat_pieces = [p for p in pieces if p.path.startswith(STATS + '/')]
    self.nic = link.Interface(f'shard{index}', bandwidth_gbps, latency_ms)
    self.lock = threading.Lock()
    self.update_s = 0.0  # time spent aggregating and updating, since popped
    self._tx = tx
    self._num_workers = num_workers
    # What each worker sends (gradients, then new statistics) lands in its
    # row of one array, laid out as a wire vector of this shard's pieces, so
    # that the whole round reaches the update program in one host-to-CPU-
    # device copy; inbox[w] views row w piece by piece.
    self._layout = wire.Layout({
        p.key: jax.ShapeDtypeStruct(p.shape, wire.DTYPE)
        for p in self.param_pieces + self.stat_pieces})
    self._num_param_elements = self._layout.offsets[len(self.param_pieces)]
    self.received = np.zeros((num_workers, self._layout.size), wire.DTYPE)
    self.inbox = [self._layout.views(row) for row in self.received]
    self.params = self.stats = self.opt_state = None
    self._mean = None
    self._cpu = host_device()
    # Compiled now, so that the first step's time is the step's. No buffer
    # donation: in async mode a pull may still be copying the previous
    # parameters while the next gradient is applied.
    on_cpu = jax.sharding.SingleDeviceSharding(self._cpu)
    params = {p.key: jax.ShapeDtypeStruct(p.shape, np.float32, sharding=on_cpu)
              for p in self.param_pieces}
    opt_state = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on_cpu),
        jax.eval_shape(tx.init, params))
    vector = lambda *shape: jax.ShapeDtypeStruct(shape, np.float32, sharding=on_cpu)
    self._aggregate = jax.jit(functools.partial(
        _aggregate, num_param_elements=self._num_param_elements)).lower(
            vector(num_workers, self._layout.size)).compile()
    self._apply = jax.jit(self._update).lower(
        params, opt_state, vector(self._layout.size),
        jax.ShapeDtypeStruct((), np.float32, sharding=on_cpu)).compile()

  # --- State in and out -------------------------------------------------------
  def load(self, params, batch_stats, opt_state, params_treedef) -> None:
    """Takes this shard's pieces of host copies of the whole state."""
    put = lambda tree: jax.device_put(tree, self._cpu)
    self.params = put(state_split.split(params, PARAMS, self.pieces))
    self.stats = state_split.split(batch_stats, STATS, self.pieces)
    self.opt_state = put(state_split.split_opt_state(
        opt_state, params_treedef, self.pieces))

  def variables(self) -> dict:
    """{piece key: host array} of parameters and statistics, as they are now."""
    with self.lock:  # one consistent version, even while gradients arrive
      params, stats = self.params, dict(self.stats)
    return {**{k: np.asarray(v) for k, v in params.items()}, **stats}

  # --- Updates ----------------------------------------------------------------
  def _update(self, params, opt_state, received, scale):
    """One optax update from a received row (its gradient part), inside jit."""
    grads = {k: v * scale for k, v in self._layout.views(received).items() if k in params}
    updates, opt_state = self._tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  def aggregate(self) -> float:
    """Sync: averages the workers' gradients and statistics; returns the
    mean gradient's squared norm."""
    start = time.perf_counter()
    self._mean, sumsq = self._aggregate(jax.device_put(self.received, self._cpu))
    self.update_s += time.perf_counter() - start
    return float(sumsq)

  def apply(self, scale: float, finite: bool) -> None:
    """Sync: one update with the mean gradient times `scale` (clipping)."""
    start = time.perf_counter()
    if finite:
      self.params, self.opt_state = self._apply(
          self.params, self.opt_state, self._mean,
          jax.device_put(np.float32(scale), self._cpu))
      # Running statistics: the mean of the workers' updated ones, which is
      # what batch norm over groups of one worker's examples gives in SPMD.
      mean = self._layout.views(np.asarray(self._mean))
      for p in self.stat_pieces:
        self.stats[p.key] = mean[p.key]
      jax.block_until_ready(self.params)
    self._mean = None
    self.update_s += time.perf_counter() - start

  def apply_one(self, worker: int, scale: float) -> None:
    """Async: applies one worker's gradient (in its inbox) on arrival.

    The gradient is scaled by `scale` (clipping by its own norm); the
    shard's schedule gives each arrival 1/N_w of a step's learning rate. The
    worker's change of the running statistics is added divided by N_w.
    """
    inbox = self.inbox[worker]
    with self.lock:
      start = time.perf_counter()
      self.params, self.opt_state = self._apply(
          self.params, self.opt_state,
          jax.device_put(self.received[worker], self._cpu),
          jax.device_put(np.float32(scale), self._cpu))
      for p in self.stat_pieces:
        self.stats[p.key] = self.stats[p.key] + inbox[p.key] / np.float32(self._num_workers)
      jax.block_until_ready(self.params)
      self.update_s += time.perf_counter() - start

  def pop_update_s(self) -> float:
    value, self.update_s = self.update_s, 0.0
    return value


def _aggregate(received, num_param_elements: int):
  """Mean over workers (rows), summed in worker order, and the squared norm
  of its gradient part."""
  total = received[0]
  for row in received[1:]:
    total = total + row
  mean = total / received.shape[0]
  return mean, jnp.sum(jnp.square(mean[:num_param_elements]))
