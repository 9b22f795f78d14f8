"""probe/mesh_collectives.py: the device groups of a mesh's axes, each
collective's program as XLA compiles it, the fit of its timed points, and
the planner's cost of a step's collective from that fit."""

import jax
import numpy as np
import pytest

from planner import mesh_cost
from planner import mesh_from_probe
from probe import mesh_collectives as mcol
from trainer import hlo_collectives


def _shapes(num_devices, per_host):
  return {(s['group_size'], s['stride'], s['level'])
          for s in mcol.group_shapes(num_devices, per_host)}


def test_every_group_size_and_level_of_a_mesh_gets_its_smallest_stride():
  # Two hosts of 4: pairs inside ({0,1}) and across ({0,4}); fours inside
  # ({0..3}) and across ({0,2,4,6}); all eight across.
  assert _shapes(8, 4) == {(2, 1, 'inside a host'), (2, 4, 'across hosts'),
                           (4, 1, 'inside a host'), (4, 2, 'across hosts'),
                           (8, 1, 'across hosts')}
  assert _shapes(8, 8) == {(2, 1, 'inside a host'), (4, 1, 'inside a host'),
                           (8, 1, 'inside a host')}
  assert _shapes(1, 1) == set()


@pytest.mark.parametrize('op', mcol.OPS)
def test_each_program_is_the_collective_on_the_groups_as_xla_compiles_it(op):
  devices = jax.devices()[:8]
  shape = {'group_size': 2, 'stride': 4, 'level': 'across hosts'}
  operands = 2 if op == 'all-reduce' else 1
  program, inputs = mcol.compile_program(op, devices, shape, 4096, operands, ops_per_call=3)
  found = [c for c in hlo_collectives.collectives_in(program.as_text()) if c['op'] == op]
  # One collective a step of the loop: XLA's own reading of the program.
  assert sum(c['runs'] for c in found) == 3 * (1 if op == 'all-reduce' else operands)
  for c in found:
    # Each device's result, over the arrays given (an all-to-all's HLO may
    # hold one array as a tuple of its chunks: operands_in says so).
    assert c['bytes'] == 4096 * operands
    assert c['operands'] == mcol.operands_in(program, op)
    assert {frozenset(g) for g in c['groups']} == {frozenset(p) for p in
                                                   ([0, 4], [1, 5], [2, 6], [3, 7])}
  if op != 'all-to-all':
    assert mcol.operands_in(program, op) == operands
  out = jax.block_until_ready(program(*inputs))
  assert len(out) == operands and all(np.all(np.asarray(o) == 0) for o in out)


@pytest.mark.parametrize('op', mcol.OPS)
def test_a_group_of_three_splits_each_result_into_whole_shares(op):
  # 6 devices in hosts of 3 (three processes of 2 would give groups of 3).
  assert (3, 1, 'inside a host') in _shapes(6, 3)
  shape = {'group_size': 3, 'stride': 1, 'level': 'inside a host'}
  assert mcol.result_elements(4096, 3) == 1026  # 4104 bytes: 3 shares of 342
  program, inputs = mcol.compile_program(op, jax.devices()[:6], shape, 4096, 1, ops_per_call=1)
  found = [c for c in hlo_collectives.collectives_in(program.as_text()) if c['op'] == op]
  assert found and all(c['bytes'] == 4104 for c in found)
  jax.block_until_ready(program(*inputs))


def test_the_fit_is_the_line_through_two_sizes_and_what_each_tuples_arrays_add():
  # Made from latency 1 ms and 1 ns a byte; the 3 further arrays of a tuple
  # of 4 add 0.5 ms each, the 31 of a tuple of 32 add 4.5 ms in all.
  extra = {1: 0.0, 4: 1.5e-3, 32: 4.5e-3}
  t = lambda b, m: 1e-3 + m * b * 1e-9 + extra[m]
  timed = [{'op': 'all-reduce', 'level': 'across hosts', 'group_size': 4,
            'message_bytes': b, 'operands': m, 'hlo_operands': m, 'time_s': t(b, m)}
           for b, m in ((4096, 1), (1 << 20, 1), (4096, 32), (4096, 4))]
  # An all-to-all whose HLO holds its one array as 4 chunks.
  timed += [{'op': 'all-to-all', 'level': 'across hosts', 'group_size': 4,
             'message_bytes': b, 'operands': 1, 'hlo_operands': 4,
             'time_s': 2e-3 + b * 3e-9} for b in (4096, 1 << 20)]
  fits = mcol.fit(timed)
  reduce, scatter = fits['all-reduce across hosts 4'], fits['all-to-all across hosts 4']
  curve = [[3, pytest.approx(1.5e-3)], [31, pytest.approx(4.5e-3)]]
  assert reduce.pop('extra_arrays_s') == curve
  assert reduce == pytest.approx({'latency_s': 1e-3, 'seconds_per_byte': 1e-9,
                                  'per_operand_s': 4.5e-3 / 31, 'hlo_operands': 1})
  # The all-to-all's arrays cost what the all-reduce's do on that group.
  assert scatter.pop('extra_arrays_s') == curve
  assert scatter == pytest.approx({'latency_s': 2e-3, 'seconds_per_byte': 3e-9,
                                   'per_operand_s': 4.5e-3 / 31, 'hlo_operands': 4})


def test_a_longer_tuple_timed_faster_than_a_shorter_one_costs_as_much():
  # Timers' noise: the tuple of 32 measured below the tuple of 4.
  times = {(4096, 1): 1e-3, (1 << 20, 1): 2e-3, (4096, 4): 3e-3, (4096, 32): 2.5e-3}
  timed = [{'op': 'all-reduce', 'level': 'inside a host', 'group_size': 2,
            'message_bytes': b, 'operands': m, 'hlo_operands': m, 'time_s': t}
           for (b, m), t in times.items()]
  fit = mcol.fit(timed)['all-reduce inside a host 2']
  slope = 1e-3 / ((1 << 20) - 4096)
  first = 2e-3 - 3 * 4096 * slope
  assert fit['extra_arrays_s'] == [[3, pytest.approx(first)], [31, pytest.approx(first)]]


def test_further_arrays_cost_along_the_probes_tuples():
  timed = {'extra_arrays_s': [[3, 3e-3], [31, 10e-3]], 'per_operand_s': 10e-3 / 31}
  # 1 ms an array up to 3, then 0.25 ms an array over the next 28, and on at that.
  assert mesh_cost.further_arrays_s(timed, 0) == 0.0
  assert mesh_cost.further_arrays_s(timed, 2) == pytest.approx(2e-3)
  assert mesh_cost.further_arrays_s(timed, 17) == pytest.approx(3e-3 + 14 * 7e-3 / 28)
  assert mesh_cost.further_arrays_s(timed, 59) == pytest.approx(10e-3 + 28 * 7e-3 / 28)
  # A probe without the tuples' points: per_operand_s each.
  assert mesh_cost.further_arrays_s({'per_operand_s': 5e-4}, 4) == pytest.approx(2e-3)


def test_a_timed_collective_replaces_the_ring_where_the_probe_had_its_group():
  measured = {'all-gather across hosts 4': {'latency_s': 2e-3, 'seconds_per_byte': 3e-9,
                                            'per_operand_s': 5e-4, 'hlo_operands': 1}}
  links = mesh_cost.Links(devices_per_host=4, intra_bytes_per_s=100e9, intra_latency_s=1e-6,
                          nic_bytes_per_s=10e9, nic_latency_s=10e-6, measured=measured)
  # {0,2,4,6} crosses the hosts of 4: 2 ms + 1 MB at 3 ns + 2 more arrays.
  got = mesh_cost.collective_s('all-gather', 1e6, [[0, 2, 4, 6], [1, 3, 5, 7]], links,
                               operands=3)
  assert got == {'seconds': pytest.approx(2e-3 + 3e-3 + 1e-3), 'level': 'across hosts',
                 'group_size': 4}
  # An op or group the probe did not time: the ring of the links.
  ring = mesh_cost.collective_s('all-gather', 1e6, [[0, 1, 2, 3]], links)
  assert ring['seconds'] == pytest.approx(3e-6 + 0.75e6 / 100e9)


def test_a_probes_timed_collectives_reach_the_plans_links():
  from tests.test_mesh_plan import _probe  # pylint: disable=g-import-not-at-top
  fits = {'all-reduce inside a host 2': {'latency_s': 1e-4, 'seconds_per_byte': 0.0,
                                         'per_operand_s': 0.0, 'hlo_operands': 1}}
  probe = {**_probe(), 'mesh_collectives': {'fits': fits}}
  costing = mesh_from_probe.from_probe_record(probe)
  assert costing.links.measured == fits
  # plan.json's costed_from says which costing the plan got.
  assert costing.source == 'probe, its collectives as timed on mesh groups'
  untimed = mesh_from_probe.from_probe_record({**_probe(), 'mesh_collectives': None})
  assert untimed.links.measured == {} and untimed.source == 'probe'
