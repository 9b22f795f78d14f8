"""Which candidates a mesh plan compiles, and in what order: pure, given a
function that evaluates one candidate (planner/mesh_plan.py compiles it).

Two orders of the ladder and one bound keep a plan of a 64- or 256-device
cluster to a few compiles a mesh instead of one a rung:

- Memory falls along each axis of the ladder: at one number of
  micro-batches, remat none > dots > full; under one remat, more
  micro-batches hold fewer activations (from 2 on: the first accumulating
  rung adds a buffer for the summed gradient, so 1 against 2 is not
  ordered). So the first rung in LADDER's order that fits is found by
  trying the three remats of one micro-batch, then bisecting the number of
  micro-batches under full remat, then the cheaper remats at the number found.
- Every rung past the first adds to the step (recomputation, or the
  per-micro-batch collectives of accumulation) and none removes any: a
  mesh's first rung is a lower bound on its entry. Meshes are climbed in
  the order of their first rung's step; once `keep` meshes fit, a mesh whose
  first rung is already no faster than the keep-th fastest entry cannot
  enter the top `keep` and is not climbed.
"""

from typing import Callable

from planner import mesh_candidates as mc

Row = dict  # an evaluated candidate: at least 'fits' (bool), 'peak', 'step_s'


def mesh_entry(ladder: list[mc.Candidate], evaluate: Callable[[mc.Candidate], Row]
               ) -> tuple[Row, bool]:
  """The first rung of `ladder` (LADDER's order) whose step fits, and True;
  else the mesh's smallest miss and False. `evaluate` is called at most
  once a rung, on as few rungs as the orders above allow."""
  rows = {}

  def at(remat: str, accum: int) -> Row:
    key = (remat, accum)
    if key not in rows:
      rows[key] = evaluate(next(c for c in ladder if (c.remat, c.grad_accum) == key))
    return rows[key]

  accums = sorted({c.grad_accum for c in ladder})
  if at('none', 1)['fits']:
    return rows[('none', 1)], True
  least = at('full', accums[-1])
  if not least['fits']:
    # The gradient's buffer of accumulation may outweigh the activations it saves.
    unaccumulated = at('full', 1)
    if unaccumulated['fits']:
      return at('dots', 1) if at('dots', 1)['fits'] else unaccumulated, True
    return min(least, unaccumulated, key=lambda r: r['peak']), False
  for remat in ('dots', 'full'):
    if at(remat, 1)['fits']:
      return rows[(remat, 1)], True
  low, high = 1, len(accums) - 1  # full remat fits at accums[high]
  while low < high:
    middle = (low + high) // 2
    if at('full', accums[middle])['fits']:
      high = middle
    else:
      low = middle + 1
  accum = accums[high]
  for remat in ('none', 'dots'):
    if at(remat, accum)['fits']:
      return rows[(remat, accum)], True
  return at('full', accum), True


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
