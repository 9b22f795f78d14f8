"""The parameter-server engine: push, aggregate and update, pull.

A synchronous step:
  1. compute: every worker device runs forward and backward on its slice of
     the global batch with its own copy of the parameters (workers.py);
  2. push: each worker's gradients leave its device and cross its link to
     every shard that owns a piece of them (link.py paces the bytes);
  3. update: each shard averages the N_w gradients of its pieces and applies
     the optax update to them (shard.py);
  4. pull: each worker receives the fresh pieces from every shard over the
     links and puts them on its device.
Asynchronous workers (async_workers.py) run steps 4, 1, 2 in their own
threads and shards apply each gradient on arrival.

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

from trainer import validation
from configs.errors import UsageError
from trainer import optim
from trainer.engines.emulation import link
from trainer.engines.ps import partition
from trainer.engines.ps import shard as shard_lib
from trainer.engines.ps import state_split
from trainer.engines.emulation import threads
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers
from trainer.engines.ps.state_split import PARAMS, STATS
from trainer.state import TrainState

# Running statistics that the engine can combine across workers: averages.
_AVERAGEABLE_STATS = ('mean', 'var')
# How long close() waits for the engine's threads to end. A thread finishes
# the phase it is in first (one worker's compute of a step, a paced
# transfer), which on a large model on CPU takes tens of seconds.
CLOSE_TIMEOUT_S = 120.0


def check_batch_stats(model_name: str, batch_stats) -> None:
  """UsageError for batch statistics that are not running averages."""
  for path in state_split.flat_variables({}, batch_stats):
    if path.rsplit('/', 1)[-1] not in _AVERAGEABLE_STATS:
      raise UsageError(
          f'engine=ps cannot keep {model_name}\'s batch statistic {path}: it '
          f'combines workers\' running averages ({", ".join(_AVERAGEABLE_STATS)}) '
          'only; use engine=spmd')


class ParameterServerEngine:
  """Workers are devices; server shards live in host memory (ARCHITECTURE.md)."""

  def __init__(self, exp):
    config, ps, network = exp.config, exp.config.ps, exp.config.network
    self._exp = exp
    self._async = ps.mode == 'async'
    devices = jax.devices()
    self.num_workers = n = validation.num_emulated_workers(config, len(devices))
    self._overlap = ps.overlap
    if self._overlap and devices[0].platform == 'cpu' and n == len(devices):
      # XLA hands a gradient to the host by placing it on the first CPU
      # device, which waits behind that device's own running step.
      raise UsageError(
          'ps.overlap on CPU devices needs one device that is not a worker, '
          'where gradients reach the host during backprop: set '
          'network.num_workers below the device count (emulate more devices with '
          'XLA_FLAGS=--xla_force_host_platform_device_count=N if needed)')
    # The last N_w devices: on a CPU-only machine the first one is also the
    # host's, where shards compute and host callbacks land (ps.overlap).
    self.devices = devices[len(devices) - n:]
    self._mesh = workers.worker_mesh(self.devices)
    P = jax.sharding.PartitionSpec
    self.batch_sharding = jax.sharding.NamedSharding(self._mesh, P(workers.AXIS))
    self.step_phases = ('compute_s', 'push_s', 'update_s', 'pull_s', 'wait_s')
    self._replicated = jax.sharding.NamedSharding(self._mesh, P())

    abstract = exp.abstract_state
    check_batch_stats(config.model.name, abstract.batch_stats)
    self.variables = state_split.flat_variables(abstract.params, abstract.batch_stats)
    self._params_treedef = jax.tree.structure(abstract.params)
    self.layout = wire.Layout(self.variables)
    self.shard_pieces = partition.partition(self.variables, ps.num_shards,
                                            ps.partitioner)
    self.thread_prefix = threads.new_prefix()

    # The workers' programs first: a run whose workers do not fit their
    # devices stops here, before the shards compile and before anything is
    # written.
    start = time.perf_counter()
    if self._async:
      from trainer.engines.ps import async_workers  # pylint: disable=g-import-not-at-top
      self._runner = async_workers.AsyncRunner(self, exp, config.batch_size // n)
      workers.check_memory(exp, self._runner.program, self.layout)
    else:
      self._program = workers.compile_sync_program(
          exp, self._mesh, self.layout, self._send_gradient if ps.overlap else None)
      workers.check_memory(exp, self._program, self.layout)
    compile_s = time.perf_counter() - start

    # Shards clip with the global norm themselves (sync: of the mean
    # gradient, as SPMD does; async: of each worker's gradient), so their
    # optax chain holds an identity where clipping was.
    lr_fn = exp.learning_rate_fn
    if self._async:
      # Each of the N_w gradients of a round is one optax update and
      # advances its step count: the schedule reads the count in rounds
      # (global steps), and each update moves 1/N_w of a step's rate, so
      # momentum, weight decay and Adam alike add up to one step per round.
      lr_fn = lambda count: exp.learning_rate_fn(count // n) / n  # pylint: disable=unnecessary-lambda-assignment
    tx = optim.create_optimizer(config, lr_fn, clip=False)
    self.shards = [
        shard_lib.ServerShard(j, pieces, tx, n, bandwidth_gbps=network.bandwidth_gbps,
                              latency_ms=network.latency_ms)
        for j, pieces in enumerate(self.shard_pieces)]
    self.worker_nics = [link.Interface(f'worker{i}', network.bandwidth_gbps, network.latency_ms)
                        for i in range(n)]
    self._clip = config.grad_clip_norm
    self._skip_nonfinite = config.nonfinite == 'skip'
    self.transfers = concurrent.futures.ThreadPoolExecutor(
        n * len(self.shards), thread_name_prefix=f'{self.thread_prefix}link')
    self._tasks = concurrent.futures.ThreadPoolExecutor(
        max(n, len(self.shards)), thread_name_prefix=f'{self.thread_prefix}task')

    # ps.overlap: each parameter's gradient is sent the moment backprop has
    # made it, one message per variable on a per-(worker, shard) connection
    # that keeps the messages in order.
    self._param_paths = [p for p in self.variables if p.startswith(PARAMS + '/')]
    self._owners = {path: [] for path in self._param_paths}
    for j, pieces in enumerate(self.shard_pieces):
      for p in pieces:
        if p.path in self._owners:
          self._owners[p.path].append((j, p))
    self._connections = [
        [concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f'{self.thread_prefix}connection{i}-{j}')
         for j in range(len(self.shards))]
        for i in range(n)] if self._overlap else []
    self._in_flight = [[] for _ in range(n)]

    logging.info('Compiled the PS workers\' gradient program%s in %.1fs; %d '
                 'workers, %d shards (%s MB each)', 's' if self._async else '',
                 compile_s, n, len(self.shards),
                 ', '.join(f'{b / 1e6:.1f}' for b in partition.shard_bytes(self.shard_pieces)))
    self._step = 0
    self._failure = None  # the first failure of a synchronous step's thread
    self._records = []
    self._worker_vectors = None  # each worker's variables, on its device

  # --- Engine interface -------------------------------------------------------
  def start(self, state: TrainState, meta: dict | None = None) -> None:
    host = jax.device_get(state)
    self._step = int(host.step)
    opt_state = host.opt_state
    if self._async:
      opt_state = state_split.with_counts(
          opt_state, state_split.async_counts(opt_state, meta, self.num_workers))
    for s in self.shards:
      s.load(host.params, host.batch_stats, opt_state, self._params_treedef)
    if self._async:
      self._runner.start(self._step)  # workers pull at every step
      return
    # The workers' first copies; later ones are pulled over the links.
    vector = self.layout.pack_host(host.params, host.batch_stats)
    self._worker_vectors = self._replicate(
        [jax.device_put(vector, d) for d in self.devices])

  def step(self, batch) -> None:
    if self._async:
      self._runner.submit(self._step, batch)
    else:
      self._records.append(self._sync_step(batch))
    self._step += 1

  def collect_metrics(self) -> list[dict]:
    if self._async:
      self._records.extend(self._runner.drain())
    records, self._records = self._records, []
    return records

  def state(self) -> TrainState:
    if self._async:
      self._records.extend(self._runner.drain())
    abstract = self._exp.abstract_state
    variables = [s.variables() for s in self.shards]
    opt_state = state_split.assemble_opt_state(
        abstract.opt_state, abstract.params, [s.opt_state for s in self.shards],
        self.shard_pieces)
    if self._async:
      # The SPMD side reads a count in global steps: the rounds the shards'
      # schedule reads (rounded down); checkpoint_meta keeps the exact one.
      n = self.num_workers
      opt_state = state_split.with_counts(
          opt_state, {path: c // n for path, c in self._shard_counts().items()})
    state = TrainState(
        step=np.int32(self._step),
        params=state_split.assemble(abstract.params, PARAMS, variables,
                                    self.shard_pieces),
        batch_stats=state_split.assemble(abstract.batch_stats, STATS, variables,
                                         self.shard_pieces),
        opt_state=opt_state)
    return jax.device_put(state, self._exp.state_shardings)

  def checkpoint_meta(self) -> dict:
    """What a checkpoint of state() must keep besides it to resume exactly.

    Asynchronous shards count one optax update per applied gradient: N_w per
    step, fewer when nonfinite=skip drops some. state() gives the SPMD side
    that count in rounds, rounded down; the exact counts (and N_w, in case
    it changes on resume) go into the checkpoint's metadata.
    """
    if not self._async:
      return {}
    self._records.extend(self._runner.drain())
    return state_split.async_counts_meta(self._shard_counts(), self.num_workers)

  def close(self) -> None:
    """Stops every thread of the engine; RunFailure if one does not end."""
    if self._async:
      self._runner.stop()
    # Nothing queued is run; what is running ends with its current task.
    for pool in [self.transfers, self._tasks, *sum(self._connections, [])]:
      pool.shutdown(wait=False, cancel_futures=True)
    error = self._runner.error if self._async else self._failure
    threads.join(self.thread_prefix, CLOSE_TIMEOUT_S,
                 f' (after {error})' if error is not None else '')

  # --- Optimiser step counts ----------------------------------------------------
  def _shard_counts(self) -> dict:
    """optax's step counts on the shards, which apply the same updates."""
    return state_split.counts(self.shards[0].opt_state)

  # --- Moving bytes -----------------------------------------------------------
  def push(self, worker: int, flat: dict) -> None:
    """Worker `worker`'s gradients and statistics ({path: host array}) to
    every shard's buffer for this worker; only the paths in `flat`."""
    futures = []
    for s in self.shards:
      inbox = s.inbox[worker]
      copies = [(inbox[p.key], p.of(flat[p.path])) for p in s.pieces
                if p.path in flat]
      if not copies:
        continue
      futures.append(self.transfers.submit(
          link.transfer, self.worker_nics[worker], s.nic, copies))
    for f in futures:
      f.result()

  def pull(self, worker: int, staging: dict) -> None:
    """Every shard's pieces into this worker's `staging` ({path: array})."""
    futures = []
    for s in self.shards:
      values = s.variables()
      copies = [(p.of(staging[p.path]), values[p.key]) for p in s.pieces]
      futures.append(self.transfers.submit(
          link.transfer, s.nic, self.worker_nics[worker], copies))
    for f in futures:
      f.result()

  def pull_to_device(self, i: int, staging: np.ndarray) -> jax.Array:
    """Pulls every shard's pieces into `staging` (a wire vector) and puts it
    on worker i's device."""
    self.pull(i, self.layout.views(staging))
    return jax.block_until_ready(
        jax.device_put(staging, self.devices[i], may_alias=False))

  def shard_counters(self, step_s: float) -> dict:
    """Bytes pushed to and pulled from each shard, and its busy fraction."""
    out = {}
    for j, s in enumerate(self.shards):
      c = s.nic.pop_counters()
      busy = c['rx_busy_s'] + c['tx_busy_s'] + s.pop_update_s()
      out[f'push_bytes_shard{j}'] = c['rx_bytes']
      out[f'pull_bytes_shard{j}'] = c['tx_bytes']
      out[f'busy_shard{j}'] = busy / step_s if step_s > 0 else 0.0
    for nic in self.worker_nics:
      nic.pop_counters()
    return out

  def clip_scale(self, grad_norm: float) -> float:
    """optax.clip_by_global_norm's factor, from a norm the caller measured."""
    if self._clip > 0 and grad_norm > self._clip:
      return self._clip / grad_norm
    return 1.0

  # --- The synchronous step ---------------------------------------------------
  def _in_tasks(self, what: str, fn, count: int) -> list:
    """[fn(k) for k < count], run in the task threads; a failure of any,
    BaseException included, raises EngineThreadFailed naming what.format(k)."""
    try:
      return list(self._tasks.map(
          lambda k: threads.guarded(what.format(k), fn)(k), range(count)))
    except threads.EngineThreadFailed as e:
      self._failure = e  # for close() to name, should a thread then not stop
      raise

  def _replicate(self, per_device_vectors):
    """One array with each worker's own vector on its device."""
    return jax.make_array_from_single_device_arrays(
        per_device_vectors[0].shape, self._replicated, list(per_device_vectors))

  def _sync_step(self, batch) -> dict:
    start = time.perf_counter()
    step = self._step
    vectors, metrics = self._program(
        self._worker_vectors, batch, jax.device_put(np.int32(step), self._replicated))
    per_worker = [workers.local_shard(vectors, d) for d in self.devices]
    pushed = self._in_tasks(
        'parameter-server worker {} (compute and push)',
        lambda i: self._compute_and_push(i, per_worker[i], start), self.num_workers)
    compute_s = [c for c, _ in pushed]
    push_s = [p for _, p in pushed]

    update_start = time.perf_counter()
    metrics = jax.device_get(metrics)
    grad_norm = math.sqrt(sum(self._in_tasks(
        'parameter-server shard {} (aggregate)',
        lambda j: self.shards[j].aggregate(), len(self.shards))))
    loss = float(np.mean(metrics['loss']))
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    scale = self.clip_scale(grad_norm)
    apply = finite or not self._skip_nonfinite
    self._in_tasks('parameter-server shard {} (update)',
                   lambda j: self.shards[j].apply(scale, apply), len(self.shards))
    update_s = time.perf_counter() - update_start

    pulled = self._in_tasks('parameter-server worker {} (pull)', self._timed_pull,
                            self.num_workers)
    self._worker_vectors = self._replicate([v for v, _ in pulled])
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
        **self.shard_counters(step_s),
    }

  def _compute_and_push(self, i: int, local: jax.Array, start: float):
    """Waits for worker i's gradients and statistics, then pushes them
    (with overlap: the statistics, and waits for the gradients in flight)."""
    jax.block_until_ready(local)
    computed = time.perf_counter()
    flat = self.layout.views(np.asarray(jax.device_get(local))[0])
    if self._overlap:  # the gradients are on their way already
      flat = {p: v for p, v in flat.items() if not p.startswith(PARAMS + '/')}
    self.push(i, flat)
    if self._overlap:
      in_flight, self._in_flight[i] = self._in_flight[i], []
      link.wait_until(max([f.result() for f in in_flight], default=0.0))
    return computed - start, time.perf_counter() - computed

  def _send_gradient(self, worker, leaf, gradient) -> None:
    """Called by XLA on the host during backprop (ps.overlap): sends one
    parameter's gradient to the shards that own it, without waiting."""
    worker, path = int(worker), self._param_paths[int(leaf)]
    gradient = np.array(gradient)  # XLA's buffer is only lent to the callback
    by_shard = {}
    for j, p in self._owners[path]:
      by_shard.setdefault(j, []).append((self.shards[j].inbox[worker][p.key], p.of(gradient)))
    for j, copies in by_shard.items():
      self._in_flight[worker].append(self._connections[worker][j].submit(
          link.transfer, self.worker_nics[worker], self.shards[j].nic, copies,
          wait_for_arrival=False))

  def _timed_pull(self, i: int):
    start = time.perf_counter()
    vector = self.pull_to_device(i, self.layout.empty())
    return vector, time.perf_counter() - start


