"""The all-reduce engine: compute, all-reduce over emulated links, update.

A step:
  1. compute: every worker device runs forward and backward on its slice of
     the global batch with its own copy of the parameters (the gradient
     program the parameter-server engine uses, emulation/workers.py);
  2. all-reduce: each worker's gradients and batch statistics leave its
     device as one vector and go around the ring over the paced links
     (ring.py), until every worker holds their sum;
  3. update: each worker puts the sum back on its device and applies the
     optax update to its own copy of the parameters (update.py).

Every time recorded is measured wall clock, as in the parameter-server
engine, so the planner's predictions can be checked against both.
"""

import concurrent.futures
import threading
import time

from absl import logging
import jax
import numpy as np

from trainer.engines.allreduce import ring as ring_lib
from trainer.engines.allreduce import update as update_lib
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.emulation import threads
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers
from trainer.state import TrainState

P = jax.sharding.PartitionSpec


class AllReduceEngine:
  """Workers are devices that sum their gradients around a ring of links."""

  step_phases = ('compute_s', 'allreduce_s', 'update_s', 'wait_s')

  def __init__(self, exp):
    config = exp.config
    network = NetworkSpec.from_config(config.network, jax.device_count())
    self._exp = exp
    self.devices = workers.worker_devices(network.num_workers)
    self.num_workers = n = len(self.devices)
    self._mesh = workers.worker_mesh(self.devices)
    self.batch_sharding = jax.sharding.NamedSharding(self._mesh, P(workers.AXIS))
    self._replicated = jax.sharding.NamedSharding(self._mesh, P())
    self._stacked = jax.sharding.NamedSharding(self._mesh, P(workers.AXIS))

    abstract = exp.abstract_state
    workers.check_batch_stats(config, abstract.batch_stats)
    self.layout = wire.Layout(wire.flat_variables(abstract.params,
                                                         abstract.batch_stats))
    self._treedefs = (jax.tree.structure(abstract.params),
                      jax.tree.structure(abstract.batch_stats))

    # Both programs before anything else: a run whose workers do not fit
    # their devices stops here, before anything is written.
    start = time.perf_counter()
    self._gradients = workers.compile_sync_program(exp, self._mesh, self.layout)
    self._update = update_lib.compile_update_program(exp, self._mesh, self.layout)
    update_lib.check_memory(exp, self._gradients, self._update, self.layout)
    compile_s = time.perf_counter() - start

    self.topology = network.topology()
    self._host_vectors = [self.layout.empty() for _ in range(n)]
    self._allreduce = ring_lib.AllReduce(config.allreduce.algorithm,
                                         self._host_vectors, self.topology)
    self.thread_prefix = threads.new_prefix()
    self._tasks = concurrent.futures.ThreadPoolExecutor(
        n, thread_name_prefix=f'{self.thread_prefix}worker')
    logging.info('Compiled the all-reduce workers\' programs in %.1fs; %d workers '
                 'on %d hosts, %.1f MB per worker, %s all-reduce', compile_s, n,
                 self.topology.num_hosts,
                 self.layout.size * np.dtype(wire.DTYPE).itemsize / 1e6,
                 config.allreduce.algorithm)
    self._step = 0
    self._failure = None
    self._records = []
    self._vector = None  # each worker's variables, on its device
    self._opt_state = None  # each worker's optimiser state, on its device

  # --- Engine interface -------------------------------------------------------
  def start(self, state: TrainState, meta: dict | None = None) -> None:
    del meta  # nothing beyond the state: the update is SPMD's
    host = jax.device_get(state)
    self._step = int(host.step)
    vector = self.layout.pack_host(host.params, host.batch_stats)
    self._vector = workers.from_pieces(
        [jax.device_put(vector, d, may_alias=False) for d in self.devices], self._replicated)
    self._opt_state = jax.device_put(host.opt_state, self._replicated)

  def step(self, batch) -> None:
    self._records.append(self._run_step(batch))
    self._step += 1

  def collect_metrics(self) -> list[dict]:
    records, self._records = self._records, []
    return records

  def state(self) -> TrainState:
    first = np.asarray(jax.device_get(workers.local_shard(self._vector, self.devices[0])))
    views = self.layout.views(first)
    leaves = [views[p].astype(d) for p, d in zip(self.layout.paths, self.layout.dtypes)]
    num_params = self.layout.num_params
    state = TrainState(
        step=np.int32(self._step),
        params=jax.tree.unflatten(self._treedefs[0], leaves[:num_params]),
        batch_stats=jax.tree.unflatten(self._treedefs[1], leaves[num_params:]),
        opt_state=jax.device_get(self._opt_state))
    return jax.device_put(state, self._exp.state_shardings)

  def checkpoint_meta(self) -> dict:
    return {}

  def close(self) -> None:
    """Stops the engine's threads; RunFailure if one does not end."""
    self._tasks.shutdown(wait=False, cancel_futures=True)
    threads.join(self.thread_prefix, threads.CLOSE_TIMEOUT_S,
                 f' (after {self._failure})' if self._failure is not None else '')

  # --- The step ---------------------------------------------------------------
  def _run_step(self, batch) -> dict:
    start = time.perf_counter()
    step = self._step
    vectors, metrics = self._gradients(
        self._vector, batch, jax.device_put(np.int32(step), self._replicated))
    per_worker = [workers.local_shard(vectors, d) for d in self.devices]
    timed = self._in_workers(lambda i: self._compute_and_allreduce(i, per_worker[i], start))

    update_start = time.perf_counter()
    metrics = jax.device_get(metrics)
    loss = float(np.mean(metrics['loss']))
    summed = workers.from_pieces([s for _, _, s in timed], self._stacked,
                                 (self.num_workers, self.layout.size))
    self._vector, self._opt_state, grad_norm, finite = self._update(
        self._vector, self._opt_state, summed,
        jax.device_put(np.float32(loss), self._replicated))
    grad_norm, finite = (float(x) for x in jax.device_get((grad_norm, finite)))
    update_s = time.perf_counter() - update_start

    step_s = time.perf_counter() - start
    compute_s = float(np.mean([c for c, _, _ in timed]))
    allreduce_s = float(np.mean([a for _, a, _ in timed]))
    nics = [nic.pop_counters() for nic in self.topology.nics]
    ports = [port.pop_counters() for port in self.topology.ports]
    return {
        'loss': loss,
        'accuracy': float(np.mean(metrics['accuracy'])),
        'lr': float(self._exp.learning_rate_fn(step)),
        'grad_norm': grad_norm,
        'finite': finite,
        'compute_s': compute_s,
        'allreduce_s': allreduce_s,
        'update_s': update_s,
        'wait_s': max(0.0, step_s - compute_s - allreduce_s - update_s),
        # Bytes each NIC sent (a host's, shared by its workers), and each
        # worker's port into its host's fabric (none with one worker a host).
        'nic_bytes_per_host': float(np.mean([c['tx_bytes'] for c in nics])),
        'intra_host_bytes_per_worker': float(np.mean([c['tx_bytes'] for c in ports] or [0])),
    }

  def _compute_and_allreduce(self, i: int, local: jax.Array, start: float):
    """Worker i: waits for its gradients, takes them off its device, runs its
    part of the ring and puts the sum back on its device."""
    computed = None

    def take_off_device():
      nonlocal computed
      jax.block_until_ready(local)
      computed = time.perf_counter()
      np.copyto(self._host_vectors[i], np.asarray(jax.device_get(local))[0])

    self._allreduce.run(i, prepare=take_off_device)
    summed = jax.block_until_ready(jax.device_put(
        self._host_vectors[i][None], self.devices[i], may_alias=False))
    return computed - start, time.perf_counter() - computed, summed

  def _in_workers(self, fn) -> list:
    """[fn(i) for each worker], each in its own thread, all at once (the
    ring needs every worker running). A failure raises EngineThreadFailed
    naming the worker that failed first: the others then see the ring's
    barrier broken, which is not the cause."""
    futures = [self._tasks.submit(threads.guarded(f'all-reduce worker {i}', fn), i)
               for i in range(self.num_workers)]
    results, errors = [], []
    for f in futures:
      try:
        results.append(f.result())
      except threads.EngineThreadFailed as e:
        errors.append(e)
    if errors:
      causes = [e for e in errors
                if not isinstance(e.__cause__, threading.BrokenBarrierError)]
      self._failure = (causes or errors)[0]
      raise self._failure
    return results
