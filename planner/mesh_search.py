"""Which candidates a mesh plan compiles, and in what order: pure, given a
function that evaluates one candidate (planner/mesh_plan.py compiles it).

Two orders of the ladder and one bound keep a plan of a 64- or 256-device
cluster to a few compiles a mesh instead of one a rung:

- Memory falls along each axis of the ladder: at one number of
  micro-batches, remat none > dots > full; under one remat, more
  micro-batches hold fewer activations (from 2 on: the first accumulating
  rung adds a buffer for the summed gradient, so 1 against 2 is not
  ordered). So each remat's fewest micro-batches that fit are found by
  bisection, full remat's first, since it bounds the others from below.
- Time rises along each axis: more recomputation, or more micro-batches
  (each repeats the activations' collectives and FSDP's reduction of the
  gradients), adds to the step and removes nothing. So a mesh's fastest
  fitting rung is one of those fewest-micro-batch rungs (full remat over
  one micro-batch may lose to no remat over two), and its first rung
  (no remat, one micro-batch) is a lower bound on its entry. Meshes are
  climbed in the order of their first rung's step; once `keep` meshes fit,
  a mesh whose first rung is already no faster than the keep-th fastest
  entry cannot enter the top `keep` and is not climbed.
"""

from typing import Callable

from planner import mesh_candidates as mc

Row = dict  # an evaluated candidate: at least 'fits' (bool), 'peak', 'step_s'


def mesh_entry(ladder: list[mc.Candidate], evaluate: Callable[[mc.Candidate], Row]
               ) -> tuple[Row, bool]:
  """The fastest rung of `ladder` whose step fits, and True; else the
  mesh's smallest miss and False. `evaluate` is called at most once a rung,
  on as few rungs as the orders above allow."""
  rows = {}

  def at(remat: str, accum: int) -> Row:
    key = (remat, accum)
    if key not in rows:
      rows[key] = evaluate(next(c for c in ladder if (c.remat, c.grad_accum) == key))
    return rows[key]

  accums = sorted({c.grad_accum for c in ladder})
  if at('none', 1)['fits']:
    return rows[('none', 1)], True  # nothing recomputed, nothing repeated: the fastest
  least = at('full', accums[-1])
  if not least['fits']:
    # The gradient's buffer of accumulation may outweigh the activations it saves.
    unaccumulated = at('full', 1)
    if unaccumulated['fits']:
      return at('dots', 1) if at('dots', 1)['fits'] else unaccumulated, True
    return min(least, unaccumulated, key=lambda r: r['peak']), False

  def fewest(remat: str, low: int, high: int) -> int | None:
    """The fewest micro-batches from `low` to `high` (both in accums, 2 or
    more) at which `remat` fits, by bisection; None when it fits at none."""
    lo, hi = accums.index(low), accums.index(high)
    if lo > hi or not at(remat, accums[hi])['fits']:
      return None
    while lo < hi:
      middle = (lo + hi) // 2
      if at(remat, accums[middle])['fits']:
        hi = middle
      else:
        lo = middle + 1
    return accums[hi]

  # Full remat keeps the least: where it first fits bounds the others from
  # below. At one number of micro-batches no remat beats dots, and dots full
  # remat, so dots is searched only below where no remat first fits.
  single = at('full', 1)['fits']
  full = 1 if single else fewest('full', accums[1], accums[-1])
  floor = max(full, accums[1]) if len(accums) > 1 else None
  plain = fewest('none', floor, accums[-1]) if floor else None
  dots_at_one = single and at('dots', 1)['fits']  # then more micro-batches only cost more
  if not dots_at_one and floor and (plain is None or plain > floor):
    below = accums[accums.index(plain) - 1] if plain else accums[-1]
    fewest('dots', floor, below)
  return min((r for r in rows.values() if r['fits']), key=lambda r: r['step_s']), True


def climb(starts: list[mc.Candidate], global_batch: int,
          evaluate: Callable[[mc.Candidate], Row], keep: int = 3
          ) -> tuple[list[Row], list[Row], list[Row]]:
  """Each start's entry on its ladder, bounded as the module says. Returns
  (fitting entries, fastest first; the smallest miss of each mesh that fits
  at no rung; the first rungs not climbed, because `keep` entries are
  already faster)."""
  firsts = {}
  for start in starts:
    firsts[start] = evaluate(start)
  fitting, missing, not_climbed = [], [], []
  for start in sorted(starts, key=lambda s: firsts[s]['step_s']):
    first = firsts[start]
    if len(fitting) >= keep:
      bound = sorted(r['step_s'] for r in fitting)[keep - 1]
      if first['step_s'] >= bound:
        not_climbed.append(first)
        continue
    reuse = lambda c, start=start: firsts[start] if c == start else evaluate(c)
    entry, fits = mesh_entry(mc.rungs(start, global_batch), reuse)
    (fitting if fits else missing).append(entry)
  fitting.sort(key=lambda r: r['step_s'])
  return fitting, missing, not_climbed
