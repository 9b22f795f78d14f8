"""Timing a piece of work by running it several times.

`fn` must return only when its work is done (wrap device work in
jax.block_until_ready). The first call is not timed: it compiles and warms
caches.
"""

import resource
import time

import numpy as np


def timed_runs(fn, repeats: int) -> list[float]:
  """Wall seconds of `repeats` calls of fn(), after one untimed call."""
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def median_s(fn, repeats: int) -> float:
  """The median of timed_runs: a typical run, robust to one slow moment."""
  return float(np.median(timed_runs(fn, repeats)))


def best_s(fn, repeats: int) -> float:
  """The fastest of timed_runs: what the machine reaches at best (a peak)."""
  return float(np.min(timed_runs(fn, repeats)))


def process_cpu_s() -> tuple[float, float]:
  """(user, kernel) CPU seconds this process has used so far, all threads.

  Kernel time is where faulting in fresh memory shows (the study records
  it per engine step and per run of the workers' program).
  """
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime, usage.ru_stime
