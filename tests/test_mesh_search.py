"""planner/mesh_search.py: the bisected ladder and the bound on the meshes
climbed give the answers a rung-by-rung climb of every mesh gives, with
fewer evaluations (a stand-in for compiles whose memory and time obey
the orders the search relies on)."""

import itertools
import random

import pytest

from planner import mesh_candidates as mc
from planner import mesh_search

_REMAT_KEPT = {'none': 1.0, 'dots': 0.45, 'full': 0.12}  # activations a rung keeps
_REMAT_COST = {'none': 0.0, 'dots': 0.08, 'full': 0.3}  # its recomputation


def _stand_in(rng, global_batch, capacity):
  """Memory and time of each candidate, drawn at random per mesh, in the
  form the search assumes; and the calls made to it."""
  meshes, calls = {}, []

  def evaluate(c: mc.Candidate):
    calls.append(c)
    key = (c.data, c.fsdp, c.tensor, c.shard_update)
    if key not in meshes:
      meshes[key] = [rng.uniform(0.1, 3.0), *(rng.uniform(0.1, 0.6) for _ in range(3))]
    fixed, activation, compute, comm = meshes[key]
    micro = global_batch // (c.data * c.fsdp) // c.grad_accum
    buffer = 0.15 if c.grad_accum > 1 else 0.0
    peak = fixed + buffer + activation * _REMAT_KEPT[c.remat] * micro
    step = compute * (1 + _REMAT_COST[c.remat]) + comm * (1 + 0.05 * (c.grad_accum - 1))
    return {'name': c.name(), 'peak': peak, 'step_s': step, 'fits': peak <= capacity}
  return evaluate, calls


def _every_rung(starts, global_batch, evaluate):
  """The plain climb: every rung of every mesh, each mesh's fastest that fits."""
  fitting, missing = [], []
  for start in starts:
    rows = [evaluate(c) for c in mc.rungs(start, global_batch)]
    fits = [r for r in rows if r['fits']]
    if fits:
      fitting.append(min(fits, key=lambda r: r['step_s']))
    else:
      missing.append(min(rows, key=lambda r: r['peak']))
  return sorted(fitting, key=lambda r: r['step_s']), missing


@pytest.mark.parametrize('seed', range(20))
def test_the_search_answers_what_climbing_every_rung_answers(seed):
  rng = random.Random(seed)
  batch, capacity = 256, rng.uniform(0.3, 4.0)
  starts = mc.first_rungs(64, batch, mc.tensor_divides([16, 6144]))
  plain, plain_calls = _stand_in(random.Random(seed), batch, capacity)
  want_fitting, want_missing = _every_rung(starts, batch, plain)
  searched, calls = _stand_in(random.Random(seed), batch, capacity)
  fitting, missing, not_climbed = mesh_search.climb(starts, batch, searched, keep=3)
  assert [r['name'] for r in fitting[:3]] == [r['name'] for r in want_fitting[:3]]
  assert len(fitting) + len(missing) + len(not_climbed) == len(starts)
  assert len(set(calls)) == len(calls)  # each rung evaluated once
  assert len(calls) < len(plain_calls)


def test_when_nothing_fits_each_mesh_gives_its_smallest_miss():
  batch = 256
  starts = mc.first_rungs(64, batch, mc.tensor_divides([16, 6144]))
  plain, _ = _stand_in(random.Random(0), batch, capacity=0.05)
  _, want_missing = _every_rung(starts, batch, plain)
  searched, calls = _stand_in(random.Random(0), batch, capacity=0.05)
  fitting, missing, not_climbed = mesh_search.climb(starts, batch, searched)
  assert not fitting and not not_climbed
  assert sorted(r['peak'] for r in missing) == sorted(r['peak'] for r in want_missing)
  assert len(calls) <= 3 * len(starts)  # the first rung and the two least


def _stepped(fits):
  """A stand-in whose step rises with remat (dots +10%, full +30%) and with
  each micro-batch (+5%), and the rungs it was called on."""
  seen = []
  added = {'none': 0.0, 'dots': 0.1, 'full': 0.3}

  def evaluate(c):
    seen.append(c)
    return {'peak': 0, 'remat': c.remat, 'accum': c.grad_accum, 'fits': fits(c),
            'step_s': 1 + added[c.remat] + 0.05 * (c.grad_accum - 1)}
  return evaluate, seen


def test_a_mesh_needing_many_micro_batches_is_found_by_bisection():
  ladder = mc.rungs(mc.Candidate(8, 1, 1), global_batch=256)  # 32 a device: 18 rungs
  fits = lambda c: c.grad_accum >= 8 and c.remat != 'none' or c.grad_accum >= 16
  evaluate, seen = _stepped(fits)
  row, found = mesh_search.mesh_entry(ladder, evaluate)
  assert found and (row['remat'], row['accum']) == ('dots', 8)
  assert [(c.remat, c.grad_accum) for c in seen] == [
      ('none', 1), ('full', 32), ('full', 1),  # the first rung, and full remat's least
      ('full', 8), ('full', 4),                # bisection of full remat over 2..32: 8
      ('none', 32), ('none', 16), ('none', 8),  # of no remat over 8..32: 16
      ('dots', 8)]                             # of dots over 8..8 (below 16): 8


def test_no_remat_over_two_micro_batches_beats_full_remat_over_one():
  # Full remat recomputes the forward pass (+30% here), a second
  # micro-batch repeats a step's collectives (+5%): both fit, the second wins.
  ladder = mc.rungs(mc.Candidate(8, 1, 1), global_batch=256)
  fits = lambda c: c.remat == 'full' or c.grad_accum >= 2
  evaluate, seen = _stepped(fits)
  row, found = mesh_search.mesh_entry(ladder, evaluate)
  assert found and (row['remat'], row['accum']) == ('none', 2)
  assert len(seen) < len(ladder)


def test_a_mesh_where_only_one_micro_batch_fits_full_remat_is_found():
  # The gradient's buffer outweighs what accumulation saves.
  ladder = mc.rungs(mc.Candidate(4, 1, 1), global_batch=8)
  evaluate = lambda c: {'peak': 0, 'step_s': 0, 'remat': c.remat, 'accum': c.grad_accum,
                        'fits': (c.remat, c.grad_accum) == ('full', 1)}
  row, found = mesh_search.mesh_entry(ladder, evaluate)
  assert found and (row['remat'], row['accum']) == ('full', 1)


def test_every_memory_pattern_the_orders_allow_gets_its_fastest_fitting_rung():
  """Each remat fitting from some number of micro-batches on (from 2 up,
  no remat from no fewer than dots, dots from no fewer than full; at one
  micro-batch full, then dots too, or neither): the fastest rung that fits,
  from at most 12 of the 18 rungs of 32 images a device."""
  ladder = mc.rungs(mc.Candidate(8, 1, 1), global_batch=256)
  counts = [2, 4, 8, 16, 32, None]  # None: never fits
  least = lambda k: 64 if k is None else k
  patterns = 0
  for full, dots, plain in itertools.product(counts, repeat=3):
    if not least(full) <= least(dots) <= least(plain):
      continue
    for at_one in ((), ('full',), ('full', 'dots')):
      first = {'full': full, 'dots': dots, 'none': plain}
      fits = lambda c, first=first, at_one=at_one: (
          c.remat in at_one if c.grad_accum == 1 else c.grad_accum >= least(first[c.remat]))
      evaluate, seen = _stepped(fits)
      row, found = mesh_search.mesh_entry(ladder, evaluate)
      assert len(seen) <= 12
      fitting = [evaluate(c)['step_s'] for c in ladder if fits(c)]
      assert found == bool(fitting)
      if fitting:
        patterns += 1
        assert row['step_s'] == min(fitting), (first, at_one)
  assert patterns == 167
