"""The time of an all-reduce and an all-gather on a set of devices, by size.

One program per (devices, collective, size): `ops_per_call` collectives
chained in a loop (each one's input is the last one's output, so none can
start early or be dropped), timed as whole calls and divided by
`ops_per_call`. A call's dispatch is thus shared by its collectives: the
time is the collective's own, as inside a train step's program, plus
1/ops_per_call of one dispatch.

Message size follows nccl-tests: the bytes each device holds at the end.
An all-reduce sums every device's buffer of that size; an all-gather
collects a 1/p share from each of the p devices.
"""

from concurrent import futures

import jax
import numpy as np

from probe import settings
from core import timing

AXIS = 'probe'


def _mesh(devices) -> jax.sharding.Mesh:
  return jax.make_mesh((len(devices),), (AXIS,), devices=devices,
                       axis_types=(jax.sharding.AxisType.Explicit,))


def _body(op: str, participants: int, ops_per_call: int):
  """What each device runs: `ops_per_call` chained collectives of `op`."""
  if op == 'all_reduce':
    def one(_, x):
      return jax.lax.psum(x, AXIS)
  else:
    def one(i, x):
      gathered = jax.lax.all_gather(x, AXIS, tiled=True)
      # A different share each time: nothing can tell the gather is undone.
      return jax.lax.dynamic_slice_in_dim(gathered, (i % participants) * x.size, x.size)
  return lambda x: jax.lax.fori_loop(0, ops_per_call, one, x)


def compile_program(op: str, devices, message_bytes: int, ops_per_call: int):
  """(compiled program, its zero-filled input) for one size on `devices`."""
  p = len(devices)
  mesh = _mesh(devices)
  elements = message_bytes // settings.FLOAT_BYTES  # per device, at the end
  per_device = elements if op == 'all_reduce' else elements // p
  sharding = jax.sharding.NamedSharding(mesh, jax.P(AXIS))
  # check_vma=False: the loop's carry stays "varying" after the psum (it is
  # the same on every device, which is all the loop needs).
  program = jax.jit(jax.shard_map(_body(op, p, ops_per_call), mesh=mesh,
                                  in_specs=jax.P(AXIS), out_specs=jax.P(AXIS),
                                  check_vma=False))
  shape = (p * per_device,)
  compiled = program.lower(jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)).compile()
  # Zeros: sums of zeros never overflow, however often they are chained.
  # Each device's share made alone: the whole array may not fit one host.
  x = jax.make_array_from_callback(shape, sharding,
                                   lambda _: np.zeros(per_device, np.float32))
  return compiled, x


def compile_all(op: str, devices, sizes, ops_per_call: int) -> list:
  """compile_program for every size, compiled side by side (XLA's compiler
  runs without Python's lock)."""
  with futures.ThreadPoolExecutor(min(len(sizes), 8)) as pool:
    return list(pool.map(lambda s: compile_program(op, devices, s, ops_per_call), sizes))


def time_s(program, x, repeats: int, ops_per_call: int) -> float:
  """One collective's median time, seconds."""
  return timing.median_s(lambda: jax.block_until_ready(program(x)), repeats) / ops_per_call
