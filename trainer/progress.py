"""Progress lines for long, otherwise silent work (the plan sweep, bench, the
study): how far it is, and how long the rest should take."""

import time


def duration_text(seconds: float) -> str:
  """'45 s', '12 min', '2.5 h': rounded to what a reader plans by."""
  if seconds < 90:
    return f'{seconds:.0f} s'
  if seconds < 90 * 60:
    return f'{seconds / 60:.0f} min'
  return f'{seconds / 3600:.1f} h'


def eta_text(done: int, total: int, elapsed_s: float) -> str:
  """'ETA ~12 min': the items left times the mean time of those done so far.

  '' when nothing is done yet (no mean to go by) or nothing is left.
  """
  if done <= 0 or done >= total:
    return ''
  return f'ETA ~{duration_text(elapsed_s / done * (total - done))}'


def done_line(what: str, index: int, total: int, took_s: float,
              eta: str = '') -> str:
  """'cell 3/12 done in 41.2 s, ETA ~6 min' (index counts from 1)."""
  line = f'{what} {index}/{total} done in {took_s:.1f} s'
  return f'{line}, {eta}' if eta else line


class Every:
  """True at most once per `interval_s` seconds: for a line now and then
  inside a loop whose iterations take anything from milliseconds to minutes."""

  def __init__(self, interval_s: float, clock=time.monotonic):
    self._interval_s = interval_s
    self._clock = clock
    self._last = clock()

  def due(self) -> bool:
    now = self._clock()
    if now - self._last < self._interval_s:
      return False
    self._last = now
    return True
