"""Each collective a sharded step runs, timed inside a program, on the
device groups a mesh's axes form: the mesh planner's cost of a collective
by what it is, not by a ring model of the links.

A mesh of the job's devices in order (G to a host) splits into groups
along one axis: a group of n devices a stride s apart (the tensor axis,
innermost, has stride 1; the axes outside it larger strides). What a
collective costs depends on n, on whether its group stays inside a host or
crosses hosts, and on the op. For each such (op, n, level), on the group
shape of the smallest stride that has it:

- one program chains `ops_per_call` collectives (each one's input the last
  one's output), timed as whole calls, every group of the mesh at once, as
  in a train step;
- at two result sizes per device (SMALL_BYTES, LARGE_BYTES) with one array,
  and, for the all-reduce, at SMALL_BYTES with each of TUPLE_OPERANDS
  arrays reduced in one collective (a tuple, as XLA combines a step's
  gradients);
- fitted as t = latency_s + bytes x seconds_per_byte (two sizes: exact),
  and what the further arrays of one collective add, at each tuple timed
  (extra_arrays_s: [[further arrays, seconds]], the all-reduce's: what the
  library pays per array, whatever the op; per_operand_s is the largest
  tuple's average).

Bytes are what each device holds at the end, as trainer/hlo_collectives.py
counts a compiled step's collectives, and arrays are what the HLO holds (an
all-to-all of one array may be a tuple of its n chunks: hlo_operands), so a
step's collective is costed at latency_s + its bytes x seconds_per_byte +
what its arrays beyond hlo_operands add, read off extra_arrays_s
(planner/mesh_cost.py: further_arrays_s).
"""

import jax
import numpy as np

from probe import collectives
from probe import processes
from trainer import hlo_collectives

OPS = ('all-reduce', 'all-gather', 'all-to-all', 'collective-permute')
SMALL_BYTES = 4096
LARGE_BYTES = 1 << 20
# A step's collectives hold from a few arrays (a layer's) to tens (the
# gradients combined), and what an array adds need not be the same in both:
# where collectives wait a scheduler tick at times, each array of a short
# tuple may wait one where a long tuple's arrays share fewer. Both are
# timed, and a step's tuple is costed along them; the long one also
# averages out a tick more or less (in a tuple of 4 alone it moves the
# cost per array by a third of a tick).
TUPLE_OPERANDS = (4, 32)
_AXES = ('outer', 'group', 'inner')


def group_shapes(num_devices: int, devices_per_host: int) -> list[dict]:
  """[{'group_size', 'stride', 'level'}]: for each group size n > 1 that
  divides the devices and each level it can have ('inside a host' or
  'across hosts'), the smallest stride s (n x s dividing the devices) whose
  groups {b, b+s, ..., b+(n-1)s} have it."""
  shapes = {}
  for n in range(2, num_devices + 1):
    if num_devices % n:
      continue
    for s in range(1, num_devices // n + 1):
      if (num_devices // n) % s:
        continue
      hosts = {d // devices_per_host for d in range(0, n * s, s)}
      level = 'inside a host' if len(hosts) == 1 else 'across hosts'
      shapes.setdefault((n, level), {'group_size': n, 'stride': s, 'level': level})
  return [shapes[k] for k in sorted(shapes)]


def _one(op: str, n: int):
  """(arrays, loop index) -> one collective of `op` over the group axis on
  each array; it keeps each array's shape (one's result is the next input)."""
  if op == 'all-reduce':
    return lambda xs, _: tuple(jax.lax.psum(xs, 'group'))
  if op == 'all-gather':
    # The result is n times the input; a slice of it is the next input (a
    # different one each time: nothing can tell the gather is undone).
    return lambda xs, i: tuple(jax.lax.dynamic_slice_in_dim(
        jax.lax.all_gather(x, 'group', tiled=True), (i % n) * x.size, x.size) for x in xs)
  if op == 'all-to-all':
    return lambda xs, _: tuple(jax.lax.all_to_all(x, 'group', 0, 0, tiled=True) for x in xs)
  if op == 'collective-permute':
    ring = [(i, (i + 1) % n) for i in range(n)]
    return lambda xs, _: tuple(jax.lax.ppermute(x, 'group', ring) for x in xs)
  raise ValueError(f'unknown collective {op!r}; one of {OPS}')


def result_elements(message_bytes: int, n: int) -> int:
  """The float32 elements of each device's result nearest above
  `message_bytes` that split into n equal shares (an all-gather's inputs,
  an all-to-all's chunks)."""
  return -(-message_bytes // (4 * n)) * n


def group_mesh(devices, shape: dict) -> jax.sharding.Mesh:
  """`devices` as a mesh ('outer', 'group', 'inner') whose 'group' axis is
  the groups of `shape`: n devices a stride s apart."""
  n, s = shape['group_size'], shape['stride']
  return jax.make_mesh((len(devices) // (n * s), n, s), _AXES, devices=devices,
                       axis_types=(jax.sharding.AxisType.Explicit,) * 3)


def compile_program(op: str, devices, shape: dict, message_bytes: int, operands: int,
                    ops_per_call: int):
  """(compiled program, its zero-filled inputs): `ops_per_call` chained
  collectives of `op` on every group of `shape` at once, each over
  `operands` float32 arrays whose result is result_elements(message_bytes,
  n) per device."""
  n = shape['group_size']
  mesh = group_mesh(devices, shape)
  elements = result_elements(message_bytes, n)
  per_device = elements // n if op == 'all-gather' else elements
  one = _one(op, n)

  def body(*xs):
    return jax.lax.fori_loop(0, ops_per_call, lambda i, c: one(c, i), tuple(xs))

  spec = jax.P(_AXES)
  program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,) * operands,
                                  out_specs=(spec,) * operands, check_vma=False))
  sharding = jax.sharding.NamedSharding(mesh, spec)
  full = (len(devices) * per_device,)
  abstract = [jax.ShapeDtypeStruct(full, np.float32, sharding=sharding)] * operands
  compiled = program.lower(*abstract).compile()
  inputs = [jax.make_array_from_callback(full, sharding,
                                         lambda _: np.zeros(per_device, np.float32))
            for _ in range(operands)]
  return compiled, inputs


def operands_in(compiled, op: str) -> int:
  """The arrays one collective of `op` in the compiled program combines, as
  its HLO holds them (an all-to-all may be a tuple of its n chunks)."""
  return max(c['operands'] for c in hlo_collectives.collectives_in(compiled.as_text())
             if c['op'] == op)


def points(shape: dict) -> list[tuple[str, int, int]]:
  """(op, message_bytes, operands) timed on one group shape."""
  out = []
  for op in OPS:
    out += [(op, SMALL_BYTES, 1), (op, LARGE_BYTES, 1)]
    if op == 'all-reduce':
      out += [(op, SMALL_BYTES, m) for m in TUPLE_OPERANDS]
  return out


def time_all(devices, devices_per_host: int, repeats: int, ops_per_call: int) -> list[dict]:
  """This process's time of every point on every group shape of `devices`
  (the job's, host by host): [{op, group_size, stride, level,
  message_bytes, operands, hlo_operands, time_s}]. Every process walks the
  same loops, meeting before each timing."""
  timed = []
  for shape in group_shapes(len(devices), devices_per_host):
    for op, message_bytes, operands in points(shape):
      program, inputs = compile_program(op, devices, shape, message_bytes, operands,
                                        ops_per_call)
      processes.barrier()
      timed.append({'op': op, **shape,
                    'message_bytes': 4 * result_elements(message_bytes, shape['group_size']),
                    'operands': operands, 'hlo_operands': operands_in(program, op),
                    'time_s': collectives.time_s(lambda xs: program(*xs), inputs, repeats,
                                                 ops_per_call)})
  return timed


def record(by_process: list[list[dict]], ops_per_call: int) -> dict:
  """probe.json's mesh_collectives from every process's time_all: each
  point at the slowest process's time, and the fits."""
  timed = [{**point, 'time_s': max(p[i]['time_s'] for p in by_process),
            'time_s_by_process': [p[i]['time_s'] for p in by_process]}
           for i, point in enumerate(by_process[0])]
  return {'what': ('each collective of a sharded step, timed inside a program on every '
                   'group of a mesh axis at once (probe/mesh_collectives.py)'),
          'ops_per_call': ops_per_call, 'points': timed, 'fits': fit(timed)}


def fit(timed: list[dict]) -> dict:
  """{'<op> <level> <n>': {latency_s, seconds_per_byte, extra_arrays_s,
  per_operand_s, hlo_operands}} from the timed points ({op, group_size,
  level, message_bytes, operands, hlo_operands, time_s}): per (op, level,
  n) the line through its two one-array sizes (a slope below zero, the
  timers' noise, is 0) and the arrays its HLO held there; every op's
  further arrays at what they added to the all-reduce on that group, per
  tuple timed (never below 0, nor below a shorter tuple's)."""
  groups = {}
  for q in timed:
    groups.setdefault((q['op'], q['level'], q['group_size']), []).append(q)
  table = {}
  for (op, level, n), qs in groups.items():
    single = sorted((q for q in qs if q['operands'] == 1), key=lambda q: q['message_bytes'])
    small, large = single[0], single[-1]
    slope = max(0.0, (large['time_s'] - small['time_s'])
                / (large['message_bytes'] - small['message_bytes']))
    latency = max(0.0, small['time_s'] - slope * small['message_bytes'])
    table[key(op, level, n)] = {'latency_s': latency, 'seconds_per_byte': slope,
                                'extra_arrays_s': [], 'per_operand_s': 0.0,
                                'hlo_operands': small['hlo_operands']}
  for (op, level, n), qs in groups.items():
    tuples = sorted((q for q in qs if q['operands'] > 1), key=lambda q: q['operands'])
    if op != 'all-reduce' or not tuples:
      continue
    entry = table[key(op, level, n)]
    curve, floor = [], 0.0
    for q in tuples:
      one = next(p for p in qs
                 if p['operands'] == 1 and p['message_bytes'] == q['message_bytes'])
      # The tuple's arrays each hold message_bytes: the bytes term grows too.
      extra_bytes = (q['operands'] - 1) * q['message_bytes'] * entry['seconds_per_byte']
      floor = max(floor, q['time_s'] - one['time_s'] - extra_bytes)
      curve.append([q['hlo_operands'] - one['hlo_operands'], floor])
    arrays, seconds = curve[-1]
    for other in OPS:
      if key(other, level, n) in table:
        table[key(other, level, n)].update(extra_arrays_s=[list(p) for p in curve],
                                           per_operand_s=seconds / arrays)
  return table


def key(op: str, level: str, n: int) -> str:
  return f'{op} {level} {n}'
