"""Asynchronous workers with bounded staleness (stale-synchronous parallel).

Each worker runs its own loop in its own thread with its own single-device
executable: pull the parameters that are on the shards now, compute the
gradients of its slice of step t, push them; each shard applies a gradient
as soon as it has arrived (Downpour SGD, TensorFlow's asynchronous PS). A
worker starts step t only when every worker has finished t - max_staleness
steps (steps 0 .. t - max_staleness - 1), so the parameters it reads contain
every gradient of those steps. The staleness recorded for each gradient is t
minus the number of steps all workers had finished just before its pull: 0
means it saw every earlier step (an upper bound: a step may finish during
the pull). With nonfinite=skip a dropped gradient is not an optax update,
so the learning-rate schedule runs that fraction of a step late.

Global step t is worker i's slice i of the loop's global batch t, so the two
modes see the same data in the same order.

A failure in a worker thread, of any kind, is kept and raised by the loop's
next call (submit, drain); the other workers stop at their next wait or
phase. The engine's close() joins the threads (threads.py).

The runner moves bytes only through the cluster's methods (cluster.py):
pull_to_device, push_and_apply and shard_counters.
"""

import queue
import threading
import time

import jax
import numpy as np

from trainer.engines.emulation import threads
from trainer.engines.emulation import workers
from trainer.engines.ps import cluster as cluster_lib

_POLL_S = 1.0  # how often a blocked thread looks for a failure elsewhere


class _Stopped(RuntimeError):
  """Raised in a waiting thread when the engine closes: an end, not a failure."""


class AsyncRunner:
  """Worker threads and their bookkeeping, for AsyncParameterServerEngine."""

  def __init__(self, cluster: cluster_lib.Cluster, exp, programs):
    """programs: each worker's compiled program on its device
    (workers.compile_async_programs)."""
    self._cluster = cluster
    self._exp = exp
    self._programs = programs
    self.max_staleness = exp.config.ps.max_staleness
    self._skip_nonfinite = exp.config.nonfinite == 'skip'
    self._clip_norm = exp.config.grad_clip_norm
    n = cluster.num_workers
    self._cond = threading.Condition()
    self._clocks = [0] * n  # steps each worker has finished
    self._queues = [queue.Queue() for _ in range(n)]
    self._results = {}  # step -> {worker: record}
    self._submitted = 0
    self._error = None
    self._stopping = False
    self._threads = []
    self._last_drain = time.perf_counter()

  def start(self, step: int) -> None:
    self._clocks = [step] * len(self._clocks)
    self._submitted = step
    self._last_drain = time.perf_counter()
    self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                      name=f'{self._cluster.thread_prefix}worker{i}')
                     for i in range(len(self._clocks))]
    for t in self._threads:
      t.start()

  @property
  def error(self) -> BaseException | None:
    """The first failure of a worker thread, if any."""
    return self._error

  def submit(self, step: int, batch) -> None:
    """Hands each worker its slice of global step `step`."""
    devices = self._cluster.devices
    slices = [{k: workers.local_shard(v, d) for k, v in batch.items()} for d in devices]
    # The loop may run ahead of the slowest worker by as much as a worker
    # may, plus one step in hand; beyond that, wait (bounded memory).
    self._wait(lambda: step - min(self._clocks) <= self.max_staleness + 1)
    for q, one in zip(self._queues, slices):
      q.put((step, one))
    self._submitted = step + 1

  def drain(self) -> list[dict]:
    """Waits for every submitted step; returns their records in step order."""
    self._wait(lambda: min(self._clocks) >= self._submitted)
    steps = sorted(self._results)
    now = time.perf_counter()
    counters = self._cluster.shard_counters(now - self._last_drain)
    self._last_drain = now
    records = []
    for step in steps:
      per_worker = [self._results[step][i] for i in sorted(self._results[step])]
      mean = lambda k, pw=per_worker: float(np.mean([r[k] for r in pw]))
      record = {k: mean(k) for k in ('loss', 'accuracy', 'grad_norm', 'compute_s',
                                     'push_s', 'update_s', 'pull_s', 'wait_s')}
      record['finite'] = float(all(r['finite'] for r in per_worker))
      record['lr'] = float(self._exp.learning_rate_fn(step))
      record['staleness_mean'] = mean('staleness')
      record['staleness_max'] = float(max(r['staleness'] for r in per_worker))
      # Bytes and busy fractions are counted per interface over the whole
      # interval since the last drain; each step gets its share.
      for key, value in counters.items():
        record[key] = value if key.startswith('busy') else value / len(steps)
      records.append(record)
    self._results = {}
    return records

  def stop(self) -> None:
    """Tells every worker thread to end (the engine joins them)."""
    with self._cond:
      self._stopping = True
      self._cond.notify_all()
    for q in self._queues:
      q.put(None)

  # --- Inside the worker threads ----------------------------------------------
  def _wait(self, condition) -> None:
    with self._cond:
      while not condition():
        if self._error is not None:
          raise self._error
        if self._stopping:
          raise _Stopped('the parameter-server workers were stopped')
        self._cond.wait(_POLL_S)
      if self._error is not None:
        raise self._error

  def _run(self, i: int) -> None:
    try:
      staging = self._cluster.layout.empty()
      while True:
        item = self._queues[i].get()
        if item is None:
          return
        self._one_step(i, *item, staging)
    except _Stopped:
      return
    # Every failure, BaseException included: the loop waits on this thread
    # and learns of its end only from _error.
    except BaseException as e:  # pylint: disable=broad-except
      with self._cond:
        self._error = self._error or threads.failure(f'parameter-server worker {i}', e)
        self._cond.notify_all()

  def _check(self) -> None:
    """Raises another thread's failure, or the stop, if there is one: between
    the phases of a step, so that a worker does not go on pushing."""
    with self._cond:
      if self._error is not None:
        raise self._error
      if self._stopping:
        raise _Stopped('the parameter-server workers were stopped')

  def _one_step(self, i: int, step: int, batch: dict, staging: dict) -> None:
    cluster = self._cluster
    device = cluster.devices[i]
    start = time.perf_counter()
    self._wait(lambda: min(self._clocks) >= step - self.max_staleness)
    with self._cond:
      staleness = step - min(self._clocks)
    pull_start = time.perf_counter()
    vector = cluster.pull_to_device(i, staging)
    self._check()

    compute_start = time.perf_counter()
    out = self._programs[i](vector, batch, jax.device_put(np.int32(step), device))
    jax.block_until_ready(out)
    self._check()

    push_start = time.perf_counter()
    pushed, metrics = jax.device_get(out)
    flat = cluster.layout.views(pushed)
    pulled = cluster.layout.views(staging)
    for path in flat:
      if path.startswith('batch_stats/'):
        flat[path] = flat[path] - pulled[path]  # this worker's change
    grad_norm = float(np.sqrt(metrics['grad_sumsq']))
    finite = bool(np.isfinite(metrics['loss']) and np.isfinite(grad_norm))
    update_s = 0.0
    if finite or not self._skip_nonfinite:
      update_s = cluster.push_and_apply(
          i, flat, cluster_lib.clip_scale(grad_norm, self._clip_norm))
    done = time.perf_counter()
    with self._cond:
      self._clocks[i] = step + 1
      self._results.setdefault(step, {})[i] = {
          'loss': float(metrics['loss']), 'accuracy': float(metrics['accuracy']),
          'grad_norm': grad_norm, 'finite': finite, 'staleness': staleness,
          'wait_s': pull_start - start, 'pull_s': compute_start - pull_start,
          'compute_s': push_start - compute_start,
          'push_s': done - push_start - update_s, 'update_s': update_s}
      self._cond.notify_all()
