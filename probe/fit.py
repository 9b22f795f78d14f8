"""Latency and bandwidth of a collective from its times at several sizes.

The model is the one the planner's formulas use for a message:
t = alpha + bytes / bandwidth. It is fitted by least squares on relative
residuals ((t - alpha - bytes/bw) / t), so that the microsecond times of
small messages weigh as much as the milliseconds of large ones: with plain
residuals the largest message alone would decide alpha. Both parameters are
kept non-negative (a negative latency or a time that falls with size is
noise, not a link).

NCCL's convention turns a collective's algorithm bandwidth (bytes / t) into
its bus bandwidth, which compares with one link's line rate whatever the
number of participants p: an all-reduce moves 2(p-1)/p of the message over
each device's link, an all-gather (p-1)/p.
"""

import dataclasses
import math

import numpy as np

OPS = ('all_reduce', 'all_gather')


@dataclasses.dataclass(frozen=True)
class Fit:
  latency_s: float  # alpha: the time of an empty message
  bytes_per_s: float  # the asymptotic rate; math.inf when time does not grow with size
  max_relative_residual: float  # the worst |t - fitted| / t over the points


def fit_latency_bandwidth(message_bytes, times_s) -> Fit:
  """Fits t = latency + bytes / bandwidth to the points, latency and
  1/bandwidth >= 0. Needs two distinct sizes and times > 0."""
  a, b, worst = fit_line(message_bytes, times_s)
  return Fit(latency_s=a, bytes_per_s=1.0 / b if b > 0 else math.inf,
             max_relative_residual=worst)


def fit_line(x, times_s) -> tuple[float, float, float]:
  """(a, b, worst relative residual) of t = a + b * x, a and b >= 0, by
  least squares of relative residuals. Needs two distinct x and times > 0."""
  x = np.asarray(x, np.float64)
  t = np.asarray(times_s, np.float64)
  if x.shape != t.shape or len(np.unique(x)) < 2:
    raise ValueError('a fit needs times at two or more distinct sizes')
  if not np.all(t > 0):
    raise ValueError(f'times must be > 0, got {t.tolist()}')
  w2 = 1.0 / t**2  # relative residuals: each squared residual over t^2

  def residual(a: float, b: float) -> float:
    return float(np.sum(w2 * (t - a - b * x)**2))

  # The unconstrained solution of the 2x2 normal equations, and the two
  # one-parameter fits on the edges of the feasible set: for two parameters
  # the constrained optimum is one of these.
  s, sx, sxx = np.sum(w2), np.sum(w2 * x), np.sum(w2 * x * x)
  st, sxt = np.sum(w2 * t), np.sum(w2 * x * t)
  det = s * sxx - sx * sx
  candidates = [(0.0, float(sxt / sxx)), (float(st / s), 0.0)]
  if det > 0:
    a, b = (sxx * st - sx * sxt) / det, (s * sxt - sx * st) / det
    if a >= 0 and b >= 0:
      candidates.append((float(a), float(b)))
  a, b = min(candidates, key=lambda ab: residual(*ab))
  return a, b, float(np.max(np.abs(t - a - b * x) / t))


def bus_factor(op: str, participants: int) -> float:
  """NCCL's bus bandwidth over algorithm bandwidth for `op` among p devices."""
  p = participants
  if op == 'all_reduce':
    return 2.0 * (p - 1) / p
  if op == 'all_gather':
    return (p - 1) / p
  raise ValueError(f'unknown collective {op!r}; one of {OPS}')
