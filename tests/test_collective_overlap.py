"""benchmarks/collective_overlap.py: the share of a collective a program
pays beside compute, the groups it times, and its four programs as XLA
compiles them."""

import os
import sys

import jax
import numpy as np
import pytest

from trainer import hlo_collectives

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), 'benchmarks'))
import collective_overlap  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_the_paid_share_is_what_the_combined_program_adds_over_the_collective():
  assert collective_overlap.paid_share(2.0, 3.0, 5.0) == pytest.approx(1.0)
  assert collective_overlap.paid_share(2.0, 3.0, 3.0) == pytest.approx(0.0)
  assert collective_overlap.paid_share(2.0, 3.0, 4.0) == pytest.approx(0.5)


def test_each_level_is_timed_on_its_largest_group():
  assert collective_overlap.level_shapes(8, 4) == [
      {'group_size': 8, 'stride': 1, 'level': 'across hosts'},
      {'group_size': 4, 'stride': 1, 'level': 'inside a host'}]
  assert collective_overlap.level_shapes(8, 8) == [
      {'group_size': 8, 'stride': 1, 'level': 'inside a host'}]


@pytest.mark.parametrize('kind,all_reduces,dots', [
    ('collective', 1, 0), ('compute', 0, 3), ('dependent', 1, 3), ('independent', 1, 3)])
def test_each_program_holds_the_all_reduce_and_the_chunk_it_names(kind, all_reduces, dots):
  shape = {'group_size': 4, 'stride': 1, 'level': 'inside a host'}
  program, inputs = collective_overlap.compile_program(kind, jax.devices()[:8], shape, 3)
  text = program.as_text()
  found = [c for c in hlo_collectives.collectives_in(text) if c['op'] == 'all-reduce']
  assert len(found) == all_reduces
  for c in found:
    assert c['groups'] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert c['runs'] == collective_overlap.OPS_PER_CALL
    assert c['bytes'] == collective_overlap.MESSAGE_BYTES
  assert text.count(' dot(') == dots
  x, a = program(*inputs)
  assert x.shape == inputs[0].shape and a.shape == inputs[1].shape


def test_the_collective_program_sums_over_its_groups_each_round():
  shape = {'group_size': 2, 'stride': 1, 'level': 'inside a host'}
  program, (x, a) = collective_overlap.compile_program('collective', jax.devices()[:8], shape, 0)
  ones = jax.device_put(np.ones(x.shape, np.float32), x.sharding)
  out, _ = program(ones, a)
  # Each round doubles every element (a pair's sum of equal values).
  np.testing.assert_allclose(np.asarray(out), 2.0 ** collective_overlap.OPS_PER_CALL)
