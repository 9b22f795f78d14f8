"""Does a step pay less for a collective when compute surrounds it?

The mesh planner costs each collective of a sharded step at what the probe
timed it alone, in a program of nothing but that collective
(probe/mesh_collectives.py), and adds them to the compute. Where devices
share cores (emulated devices; one process's 4 devices on one core) a
device waiting in a collective could leave its core to another device's
compute, and the step would pay less than the sum. This measures it: on
each level's largest group of --layout (every device of a process inside
it; every device across processes), every group at once, `OPS_PER_CALL`
rounds of

- collective: an all-reduce of 4 KiB per device, each round's input the
  last round's output;
- compute: a chunk of `repeats` 128 x 128 matmuls per device, `repeats`
  set so that one chunk takes about as long as one collective (at least
  one matmul: in one process of 8 CPU devices that is about twice as long);
- dependent: the chunk, then the all-reduce of an array computed from it,
  then the next chunk on its result (a step's critical path);
- independent: the chunk and the all-reduce, neither waiting for the other
  (a gradient's reduction beside the next layer's backward pass),

and reports the share of the collective's time each combined program adds
to the compute alone: paid_share = (combined - compute) / collective
(1: the step pays all of it; 0: it hides behind the compute).

One JSON line per level with its provenance (benchmarks/provenance.py);
--out also appends them to a file.

  .venv/bin/python benchmarks/collective_overlap.py --layout=1x8 --out=results/probe/collective_overlap.jsonl
  .venv/bin/python benchmarks/collective_overlap.py --layout=2x4 --out=results/probe/collective_overlap.jsonl
"""

import argparse
import os
import sys

import process_layout  # benchmarks/process_layout.py, beside this script
import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CHUNK = 128
MESSAGE_BYTES = 4096
OPS_PER_CALL = 20
MAX_REPEATS = 256
KINDS = ('collective', 'compute', 'dependent', 'independent')


def paid_share(collective_s: float, compute_s: float, combined_s: float) -> float:
  """The share of a collective's own time that a program of it and compute
  adds to the compute alone (pure; may leave [0, 1] by noise)."""
  return (combined_s - compute_s) / collective_s


def level_shapes(num_devices: int, devices_per_host: int) -> list[dict]:
  """Each level's largest group at its smallest stride (pure):
  [{'group_size', 'stride', 'level'}]."""
  from probe import mesh_collectives  # pylint: disable=g-import-not-at-top
  largest = {}
  for shape in mesh_collectives.group_shapes(num_devices, devices_per_host):
    if shape['group_size'] > largest.get(shape['level'], {'group_size': 0})['group_size']:
      largest[shape['level']] = shape
  return [largest[level] for level in sorted(largest)]


def compile_program(kind: str, devices, shape: dict, repeats: int):
  """(compiled program, its inputs) of `kind` on every group of `shape`."""
  # pylint: disable=g-import-not-at-top
  import jax
  import jax.numpy as jnp
  import numpy as np
  from probe import mesh_collectives
  mesh = mesh_collectives.group_mesh(devices, shape)
  elements = mesh_collectives.result_elements(MESSAGE_BYTES, shape['group_size'])
  weight = jnp.full((CHUNK, CHUNK), 1.0 / CHUNK, jnp.float32)

  def chunk(a):
    for _ in range(repeats):
      a = jnp.tanh(a @ weight)
    return a

  def one_round(_, carry):
    x, a = carry
    if kind == 'dependent':
      a = chunk(a + x[0])
      x = x + a[0, 0]
    elif kind in ('compute', 'independent'):
      a = chunk(a)
    if kind != 'compute':
      x = jax.lax.psum(x, 'group')
    return x, a

  spec = jax.P(mesh.axis_names)
  program = jax.jit(jax.shard_map(
      lambda x, a: jax.lax.fori_loop(0, OPS_PER_CALL, one_round, (x, a)),
      mesh=mesh, in_specs=(spec, spec), out_specs=(spec, spec), check_vma=False))
  sharding = jax.sharding.NamedSharding(mesh, spec)
  local = ((elements,), (CHUNK, CHUNK))  # each device's share of dim 0
  shapes = [(len(devices) * shape[0], *shape[1:]) for shape in local]
  compiled = program.lower(*(jax.ShapeDtypeStruct(full, np.float32, sharding=sharding)
                             for full in shapes)).compile()
  inputs = tuple(jax.make_array_from_callback(full, sharding,
                                              lambda _, shape=shape: np.zeros(shape, np.float32))
                 for full, shape in zip(shapes, local))
  return compiled, inputs


def worker(args) -> None:
  process_layout.initialize(args)
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np
  from probe import collectives
  from probe import processes

  def time_s(kind, shape, repeats):
    program, inputs = compile_program(kind, jax.devices(), shape, repeats)
    processes.barrier()
    return collectives.time_s(lambda xs: program(*xs), inputs, args.repeats, OPS_PER_CALL)

  levels = []
  for shape in level_shapes(jax.device_count(), args.devices):
    alone = time_s('collective', shape, 0)
    one_matmul = time_s('compute', shape, 1)
    wanted = int(np.clip(np.ceil(alone / one_matmul), 1, MAX_REPEATS))
    repeats = max(processes.gather(wanted))
    times = {'collective': alone}
    times.update({kind: time_s(kind, shape, repeats) for kind in KINDS[1:]})
    levels.append({**shape, 'repeats': repeats, 'times': times})
  everyone = processes.gather(levels)
  # Each time at the slowest process, as the probe records its own.
  for i, level in enumerate(levels):
    level['times'] = {k: max(p[i]['times'][k] for p in everyone) for k in KINDS}
  process_layout.write_result(args, levels)


def main():
  parser = argparse.ArgumentParser()
  process_layout.add_arguments(parser, default_layout='1x8', default_repeats=15)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  if args.worker:
    worker(args)
    return
  results = provenance.Results(args.out)
  levels = process_layout.run(__file__, args.layout, args.repeats)
  for level in levels:
    t = level.pop('times')
    results.write({'layout': args.layout, **level,
                   'message_bytes': MESSAGE_BYTES, 'ops_per_call': OPS_PER_CALL,
                   **{f'{k}_s': t[k] for k in KINDS},
                   'dependent_paid_share': paid_share(t['collective'], t['compute'],
                                                      t['dependent']),
                   'independent_paid_share': paid_share(t['collective'], t['compute'],
                                                        t['independent'])})


if __name__ == '__main__':
  main()
