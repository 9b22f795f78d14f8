"""The host's own work of an all-reduce engine step, timed for the planner.

As the parameter-server engine's HostTimer does for its shards, it runs the all-reduce
engine's own parts on unlimited links: the rings (copies, additions and the
barriers between ring steps, for every worker at once), the workers'
vectors off and onto their devices, the workers' update program, and the
step's fixed hand-offs. What it times is the host's work without the
bandwidth; the study adds the links from the formulas. It never looks at
the engine's step times.
"""

import concurrent.futures

import jax
import numpy as np

from trainer import state as state_lib
from core import timing
from trainer.engines.allreduce import ring as ring_lib
from trainer.engines.allreduce import update as update_lib
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers

P = jax.sharding.PartitionSpec


class AllReduceHostTimer:
  """Built once for a model, N_w, hosts of G and an algorithm; timed on
  demand (the study times it just before and just after each cell)."""

  def __init__(self, exp, num_workers: int, devices_per_host: int, algorithm: str):
    config, abstract = exp.config, exp.abstract_state
    self._n = num_workers
    self._layout = layout = wire.Layout(wire.flat_variables(
        abstract.params, abstract.batch_stats))
    self._devices = devices = workers.worker_devices(num_workers)
    mesh = workers.worker_mesh(devices)
    self._replicated = jax.sharding.NamedSharding(mesh, P())
    self._stacked = jax.sharding.NamedSharding(mesh, P(workers.AXIS))
    # Unlimited links: the host's work alone.
    topology = NetworkSpec(num_workers, devices_per_host).unlimited().topology()
    host = jax.device_get(state_lib.create_train_state(
        exp.model, exp.tx, config.data.image_size, exp.state_shardings, config.seed))
    vector = layout.pack_host(host.params, host.batch_stats)
    self._vectors = [vector.copy() for _ in range(num_workers)]
    self._allreduce = ring_lib.AllReduce(algorithm, self._vectors, topology)
    self._tasks = concurrent.futures.ThreadPoolExecutor(num_workers)
    self._on_devices = [jax.device_put(vector[None], d) for d in devices]
    self._update = update_lib.compile_update_program(exp, mesh, layout)
    self._host_state = (vector, host.opt_state)
    self._metrics = jax.device_put(  # one loss and accuracy per worker
        {'loss': np.zeros(num_workers, np.float32),
         'accuracy': np.zeros(num_workers, np.float32)}, self._stacked)

  def _round(self, fn) -> list:
    return list(self._tasks.map(fn, range(self._n)))

  def ring_s(self, repeats: int) -> float:
    """Every worker's part of the all-reduce at once, on unlimited links."""
    return timing.median_s(lambda: self._round(self._allreduce.run), repeats)

  def device_copies_s(self, repeats: int) -> float:
    """Every worker at once taking its vector off its device into its ring
    buffer, then putting the sum back on it."""
    def copies():
      self._round(lambda i: np.copyto(self._vectors[i],
                                      np.asarray(jax.device_get(self._on_devices[i]))[0]))
      self._round(lambda i: jax.block_until_ready(jax.device_put(
          self._vectors[i][None], self._devices[i], may_alias=False)))
    return timing.median_s(copies, repeats)

  def update_s(self, repeats: int) -> float:
    """The workers' update program on the summed vectors, each call on the
    state the previous one made (the program donates it), as the engine's
    steps do."""
    summed = jax.make_array_from_single_device_arrays(
        (self._n, self._layout.size), self._stacked, self._on_devices)
    loss = jax.device_put(np.float32(1.0), self._replicated)
    state = [jax.device_put(self._host_state, self._replicated)]

    def update():
      vector, opt_state, *_ = jax.block_until_ready(self._update(*state[0], summed, loss))
      state[0] = (vector, opt_state)
    return timing.median_s(update, repeats)

  def bookkeeping_s(self, repeats: int) -> float:
    """A step's fixed hand-offs: the step number put on every worker, one
    round of worker threads, the metrics fetched, the sums joined into one
    array, the loss put on every worker and the norm fetched back."""
    def bookkeeping():
      jax.block_until_ready(jax.device_put(np.int32(0), self._replicated))
      self._round(lambda i: i)
      jax.device_get(self._metrics)
      jax.make_array_from_single_device_arrays(
          (self._n, self._layout.size), self._stacked, self._on_devices)
      jax.device_get(jax.device_put(np.float32(0), self._replicated))
    return timing.median_s(bookkeeping, repeats)

  def median_s(self, repeats: int) -> dict:
    return {'ring_s': self.ring_s(repeats), 'device_copies_s': self.device_copies_s(repeats),
            'update_s': self.update_s(repeats), 'bookkeeping_s': self.bookkeeping_s(repeats)}

  def close(self) -> None:
    self._tasks.shutdown()
