"""Which process holds a run of several back, and whether for input or compute.

In a run of several processes every step ends in collectives, so all
processes step at the pace of the slowest: their step times are equal and
name no one. What differs is where each host's time goes. Over a progress
interval each process measures, per step, its step time, its wait for
input, and the time its host was blocked on its devices and its peers (the
metrics fetch, which waits for the step's collectives, and the agreement's
all-gather). Its own time is the step less the blocked part: input wait plus
the host's own work (dispatch, Python, a slow CPU). The process that holds
the others back has the most own time: the others are blocked waiting for it.

The figures travel in the all-gather the processes already do to agree on
stops and saves (coordination/agreement.py), so naming the slow process
costs no collective of its own.

What this cannot see: a device slower than its peers holds every process
alike (its collectives wait for it on the devices), so it shows in no host's
figures. The profiler's trace of each process shows it (docs/goodput.md).
"""

import numpy as np

# What each process shares per interval, per step: step, input wait, blocked.
NUM_FIGURES = 3
# A process is named when its own time exceeds the median process's by more
# than this share of the step: a smaller excess is the noise of the hosts.
BEHIND_SHARE = 0.10


class Figures:
  """This process's figures of its last progress interval, held until the
  next agreement shares them."""

  def __init__(self):
    self._pending = None

  def measured(self, step_s: float, input_wait_s: float, blocked_s: float) -> None:
    self._pending = (step_s, input_wait_s, blocked_s)

  def take(self) -> np.ndarray:
    """[has figures (0 or 1), step_s, input_wait_s, blocked_s]; the next
    take is empty until the next interval is measured."""
    pending, self._pending = self._pending, None
    return np.array([0.0] * (1 + NUM_FIGURES) if pending is None else [1.0, *pending],
                    np.float32)


def spread(step_s, input_wait_s, blocked_s) -> dict:
  """The record of one interval (metrics.jsonl's 'processes' split) from
  every process's per-step figures, in process order."""
  step_s, input_wait_s, blocked_s = (np.asarray(a, np.float64)
                                     for a in (step_s, input_wait_s, blocked_s))
  own_s = np.maximum(step_s - blocked_s, 0.0)
  median_own_s = float(np.median(own_s))
  slowest = int(np.argmax(own_s))
  excess_s = float(own_s[slowest]) - median_own_s
  step = float(np.median(step_s))
  behind = excess_s / step if step > 0 else 0.0
  named = behind > BEHIND_SHARE
  # Input when the slowest's extra input wait is most of its extra own time.
  extra_wait_s = float(input_wait_s[slowest] - np.median(input_wait_s))
  cause = ('input' if extra_wait_s >= excess_s / 2 else 'compute') if named else None
  return {'step_s': step_s.round(6).tolist(), 'input_wait_s': input_wait_s.round(6).tolist(),
          'own_s': own_s.round(6).tolist(), 'median_own_s': round(median_own_s, 6),
          'slowest_process': slowest, 'behind': round(behind, 6),
          'slow_process': slowest if named else -1, 'cause': cause}


def in_words(record: dict) -> str | None:
  """The line that names the process holding the run back; None when no
  process is more than BEHIND_SHARE of a step behind the median."""
  if record['cause'] is None:
    return None
  k = record['slow_process']
  own, wait = record['own_s'][k], record['input_wait_s'][k]
  step = float(np.median(record['step_s']))
  why = (f'it waits for input ({wait:.3f} s per step)' if record['cause'] == 'input'
         else f'its host computes (input wait only {wait:.3f} s per step)')
  return (f'process {k} of {len(record["own_s"])} holds the run back: {own:.3f} s of '
          f'its own per {step:.3f} s step against a median of '
          f'{record["median_own_s"]:.3f} s ({100 * record["behind"]:.0f}% of the step '
          f'behind); {why}')
