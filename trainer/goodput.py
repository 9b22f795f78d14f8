"""Where a run's wall time went: the goodput ledger.

Each training process accounts its wall time, from the moment the process
started (the kernel's record of it, so the interpreter's own start-up and
imports count) to its last write, into named parts that sum to the whole:

  start_up         imports, the runtime, the data set-up: until compiling begins
  compile          the train and eval steps (and the fit check on them)
  restore          the checkpoint the run starts from (or the initial state)
  step_compute     training steps, less the waits for input
  input_wait       training steps waiting for a host batch
  evaluation       evaluations during training
  checkpoint_save  the part of saving that holds the loop (and the last wait)
  lost_work        steps trained after the last checkpoint that a restart
                   trained again (moved here from the two step parts)
  other            the rest: progress lines, closing, what no part names

Goodput is step_compute's share of the wall time. Process 0 keeps the
ledger of every attempt of a run (each start of the same command) in
WORKDIR/goodput.json, so a preemption's redone steps and the restart's
start-up show as what they cost the run as a whole. The math is pure
functions of the records; `Ledger` is the clock that fills them.
"""

import contextlib
import json
import os
import time

from absl import logging

from core import atomic

FILE_NAME = 'goodput.json'
PARTS = ('start_up', 'compile', 'restore', 'step_compute', 'input_wait', 'evaluation',
         'checkpoint_save', 'lost_work', 'other')
_TIMED = PARTS[:-1]  # 'other' is what the wall time leaves


def process_started_at() -> float:
  """The wall-clock time (time.time()) at which this process started: the
  kernel's start time in /proc (clock ticks since boot, which an exec of the
  same process, main.py's malloc restart, keeps) against the boot clock; on
  a system without them, when this module loaded."""
  try:
    with open('/proc/self/stat') as f:
      # Field 22, after the command name in parentheses (which may hold spaces).
      start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])
    since_boot_s = time.clock_gettime(time.CLOCK_BOOTTIME)
  except (OSError, ValueError, IndexError, AttributeError):
    return _LOADED_AT
  return time.time() - (since_boot_s - start_ticks / os.sysconf('SC_CLK_TCK'))


_LOADED_AT = time.time()


def interpolated_step_s(marks: list[list[float]], step: int) -> float:
  """The step seconds an attempt had spent when it reached `step`, from its
  marks [[step, cumulative step seconds], ...] (ascending), linear between
  them; the first mark's below it, the last's above it."""
  if not marks:
    return 0.0
  if step <= marks[0][0]:
    return marks[0][1]
  for (s0, t0), (s1, t1) in zip(marks, marks[1:]):
    if step <= s1:
      return t0 + (t1 - t0) * (step - s0) / (s1 - s0)
  return marks[-1][1]


def charge_redone_steps(attempt: dict, resumed_at: int) -> dict:
  """`attempt` (the previous one) with the steps past `resumed_at` that it
  trained moved to lost_work: the restart trains them again. The seconds
  moved are their step time (marks interpolated), split between
  step_compute and input_wait in the attempt's proportion."""
  redone = max(0, attempt['reached_step'] - resumed_at)
  attempt = {**attempt, 'parts': dict(attempt['parts']), 'redone_steps': redone}
  if redone == 0:
    return attempt
  lost_s = (interpolated_step_s(attempt['step_marks'], attempt['reached_step']) -
            interpolated_step_s(attempt['step_marks'], resumed_at))
  parts = attempt['parts']
  step_s = parts['step_compute'] + parts['input_wait']
  lost_s = min(max(lost_s, 0.0), step_s)
  for name in ('step_compute', 'input_wait'):
    share = lost_s * parts[name] / step_s if step_s > 0 else 0.0
    parts[name] -= share
    parts['lost_work'] += share
  return attempt


def summary(attempts: list[dict]) -> dict:
  """The run as a whole: every attempt's parts added, its wall time, goodput."""
  parts = {name: sum(a['parts'][name] for a in attempts) for name in PARTS}
  wall_s = sum(a['wall_s'] for a in attempts)
  return {'wall_s': wall_s, 'parts': parts, 'attempts': len(attempts),
          'redone_steps': sum(a.get('redone_steps', 0) for a in attempts),
          'goodput': parts['step_compute'] / wall_s if wall_s > 0 else 0.0}


def in_words(run: dict) -> str:
  """'goodput 61% of 1h02m over 2 attempts (12 steps redone): step compute
  61%, compile 14%, ...': the parts over 0.5% of the wall time, largest first."""
  wall = run['wall_s']
  shares = sorted(((s / wall if wall > 0 else 0.0, name) for name, s in
                   run['parts'].items()), reverse=True)
  named = ', '.join(f'{name.replace("_", " ")} {100 * share:.0f}%'
                    for share, name in shares if share >= 0.005)
  attempts = run['attempts']
  return (f'goodput {100 * run["goodput"]:.0f}% of {_duration(wall)} over {attempts} '
          f'attempt{"s" if attempts != 1 else ""} ({run["redone_steps"]} steps redone): '
          f'{named}')


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds >= 3600:
    return f'{seconds // 3600}h{seconds // 60 % 60:02d}m'
  return f'{seconds // 60}m{seconds % 60:02d}s' if seconds >= 60 else f'{seconds} s'


def read(workdir: str) -> list[dict]:
  """The attempts goodput.json holds ([] when there is none)."""
  path = os.path.join(workdir, FILE_NAME)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return json.load(f)['attempts']


class Ledger:
  """One process's clock for one attempt; `record()` is its part of the file.

  Steps are timed as the loop's wall time less the evaluations and saves
  inside it; the waits for input come from the prefetcher's own clock.
  """

  def __init__(self, started_at: float, first_step: int = 0):
    self.started_at = started_at
    self._seconds = dict.fromkeys(_TIMED, 0.0)
    self.first_step = self.reached_step = first_step
    self._loop_began = None  # time.time() when the loop started
    self._loop_excluded_s = 0.0  # evaluations and saves inside the loop
    self._loop_wait_s = 0.0
    self._marks: list[list[float]] = []
    self._saves: list[int] = []

  def add(self, part: str, seconds: float) -> None:
    self._seconds[part] += seconds

  @contextlib.contextmanager
  def timed(self, part: str):
    """Adds the time spent inside to `part` (not to the steps, in the loop)."""
    began = time.time()
    try:
      yield
    finally:
      took = time.time() - began
      self._seconds[part] += took
      if self._loop_began is not None:
        self._loop_excluded_s += took

  @contextlib.contextmanager
  def outside_the_steps(self):
    """Time inside is no step's (the tests' pause): it falls to 'other'."""
    began = time.time()
    try:
      yield
    finally:
      if self._loop_began is not None:
        self._loop_excluded_s += time.time() - began

  def start_loop(self, step: int) -> None:
    """The training loop begins at `step`; whatever came before and has no
    part of its own was start-up."""
    now = time.time()
    self.first_step = self.reached_step = step
    self._seconds['start_up'] = max(0.0, now - self.started_at - sum(self._seconds.values()))
    self._loop_began = now
    self._marks = [[step, 0.0]]

  @property
  def loop_started(self) -> bool:
    return self._loop_began is not None

  def after_step(self, step: int, total_wait_s: float) -> None:
    """The loop has trained to `step`, having waited `total_wait_s` for
    input since it began (a few float operations: called every step)."""
    self.reached_step = step
    loop_steps_s = time.time() - self._loop_began - self._loop_excluded_s
    self._seconds['input_wait'] = min(total_wait_s, loop_steps_s)
    self._seconds['step_compute'] = loop_steps_s - self._seconds['input_wait']

  def saved(self, step: int) -> None:
    """Checkpoint `step` is being written. The one before it is complete,
    so no restart goes back further: the marks before it are dropped."""
    self._saves = (self._saves + [step])[-2:]
    self._marks = [m for m in self._marks if m[0] >= self._saves[0]] or self._marks[-1:]

  def record(self) -> dict:
    """This attempt, as of now: its wall time and parts (summing to it),
    with a mark of the step seconds at the step reached."""
    if self._marks and self._marks[-1][0] != self.reached_step:
      step_s = self._seconds['step_compute'] + self._seconds['input_wait']
      self._marks.append([self.reached_step, step_s])
    wall_s = time.time() - self.started_at
    parts = {**self._seconds, 'lost_work': 0.0}
    parts['other'] = max(0.0, wall_s - sum(parts.values()))
    return {'started_at': self.started_at, 'wall_s': wall_s, 'parts': parts,
            'first_step': self.first_step, 'reached_step': self.reached_step,
            'redone_steps': 0,  # until a restart charges them (charge_redone_steps)
            'step_marks': [list(m) for m in self._marks]}


class RunLedger:
  """goodput.json of a work dir: the earlier attempts (their redone steps
  charged when this one starts) and this one, written whole each time."""

  def __init__(self, workdir: str, ledger: Ledger, *, enabled: bool):
    self._path = os.path.join(workdir, FILE_NAME)
    self._ledger = ledger
    self._enabled = enabled
    self._earlier: list[dict] = []

  def begin(self, resumed_at: int) -> None:
    """Reads the earlier attempts; the last one's steps past `resumed_at`
    become lost work."""
    if not self._enabled:
      return
    try:
      earlier = read(os.path.dirname(self._path))
    except (OSError, ValueError, KeyError) as e:
      # An account, not a checkpoint: a file that cannot be read never stops
      # a run; the ledger starts again from this attempt.
      logging.warning('%s cannot be read (%s); the goodput ledger starts again '
                      'from this attempt', self._path, e)
      earlier = []
    if earlier:
      earlier[-1] = charge_redone_steps(earlier[-1], resumed_at)
    self._earlier = earlier

  def attempts(self) -> list[dict]:
    return self._earlier + [self._ledger.record()]

  def write(self) -> dict:
    """Writes goodput.json (process 0); returns the run's summary."""
    attempts = self.attempts()
    if self._enabled:
      atomic.write_text(self._path, json.dumps({'attempts': attempts}, indent=1) + '\n')
    return summary(attempts)
