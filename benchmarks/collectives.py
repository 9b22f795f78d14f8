"""What data parallelism over N emulated CPU devices costs per step, beyond the model.

Each device holds one array the size of a model's gradients (ResNet-18's
47 MB by default). Timed, one jitted program over all devices at a time:

- `elementwise`: each device scales its array (one read and one write of it,
  no communication): what any per-device pass over replicated state costs,
  such as the optimizer update;
- `psum`: the all-reduce that sums gradients in data parallelism;
- `psum_scatter+all_gather`: the same sum as a reduce-scatter then an
  all-gather (how FSDP and sharded optimizer states move gradients).

On one CPU the emulated devices share the cores and the memory, so N devices
move N times the bytes through the same memory: compare 2 against 8.

  .venv/bin/python benchmarks/collectives.py --devices=2 --out=results/speed/collectives.jsonl
  .venv/bin/python benchmarks/collectives.py --devices=8 --out=results/speed/collectives.jsonl

Prints one JSON line per operation: the median of --repeats runs, with its
provenance (benchmarks/provenance.py); --out also appends them to a file.
"""

import os
import sys
import time

from absl import app
from absl import flags

import provenance  # benchmarks/provenance.py, beside this script

flags.DEFINE_integer('devices', 8, 'Emulated CPU devices.')
flags.DEFINE_integer('megabytes', 47, 'Bytes per device (float32), in MB.')
flags.DEFINE_integer('repeats', 5, 'Timed runs per operation.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  results = provenance.Results(FLAGS.out)
  # Before jax is imported: the device count is fixed at start-up.
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             f' --xla_force_host_platform_device_count={FLAGS.devices}')
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  n = FLAGS.devices
  if jax.device_count() != n:
    sys.exit(f'error: asked for {n} devices, jax has {jax.device_count()}')
  mesh = jax.make_mesh((n,), ('d',), axis_types=(jax.sharding.AxisType.Explicit,))
  # Divisible by n, so that the reduce-scatter splits evenly.
  elements = FLAGS.megabytes * 10**6 // 4 // n * n
  x = jax.device_put(np.ones((n, elements), np.float32),
                     jax.sharding.NamedSharding(mesh, jax.P('d')))

  def sum_as_scatter_then_gather(a):
    part = jax.lax.psum_scatter(a, 'd', scatter_dimension=1, tiled=True)
    return jax.lax.all_gather(part, 'd', axis=1, tiled=True)

  operations = {
      'elementwise': lambda a: a * 2,
      'psum': lambda a: jax.lax.psum(a, 'd'),
      'psum_scatter+all_gather': sum_as_scatter_then_gather,
  }
  for name, fn in operations.items():
    program = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=jax.P('d'),
                                    out_specs=jax.P('d')))
    program(x).block_until_ready()  # compile and warm up
    times = []
    for _ in range(FLAGS.repeats):
      start = time.perf_counter()
      program(x).block_until_ready()
      times.append(time.perf_counter() - start)
    results.write({'operation': name, 'devices': n,
                   'megabytes_per_device': round(elements * 4 / 1e6, 1),
                   'median_s': round(float(np.median(times)), 4)})


if __name__ == '__main__':
  app.run(main)
