"""What the planner measures on the devices at hand.

Only these figures feed its predictions: the model's bytes S, the compute
time T_C of the workers' gradient program at each per-worker batch (run by
N_w workers at once, since emulated devices share the host's cores), the
host<->device copy speed, the shards' aggregate-and-update time, the host's
own work of moving a direction's bytes (on unlimited links) and the fixed
hand-offs of a step. It never looks at an engine's step times.

It reads the engines through what their packages export (the emulated
workers' timers, each emulated engine's host_timer), never their insides:
tests/test_layers.py checks that.
"""

import dataclasses
import time

from absl import logging
import jax

from trainer import engines
from trainer import memory
from trainer import mfu
from trainer import progress
from trainer.engines import emulation
from trainer.engines import ps

ComputeTimer = emulation.ComputeTimer
host_copies_s = emulation.host_copies_s
link_chunk_bytes = emulation.link_chunk_bytes
largest_shard_bytes = ps.largest_shard_bytes


def host_timer(exp, cell: dict):
  """The host's own work of cell['engine']'s step (its package's host_timer)."""
  return engines.package(cell['engine']).host_timer(exp, cell)


def update_s(exp, num_workers: int, num_shards: int, repeats: int = 3) -> float:
  """Wall time of every shard averaging N_w gradients and updating at once."""
  timer = ps.host_timer(exp, {'num_workers': num_workers, 'num_shards': num_shards})
  try:
    return timer.update_s(repeats)
  finally:
    timer.close()


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
  return memory.global_bytes((exp.abstract_state.params, exp.abstract_state.batch_stats))


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


def capacity(exp) -> int | None:
  return memory.device_capacity(exp.config.runtime.device_memory_gib)

