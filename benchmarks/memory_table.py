"""Per-device memory of ViT-B/16 and ViT-L/16 train steps on three meshes.

Compiles (does not run) the real train step of each recipe on 8 emulated CPU
devices and reads the compiled memory analysis: parameter and optimiser bytes
per device from the state's shardings, temporaries from XLA. Prints one JSON
line per case, with its provenance (benchmarks/provenance.py), and a markdown
table on standard error; --out also appends the lines to a file.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv/bin/python benchmarks/memory_table.py --batch_size=64 \
        --out=benchmarks/memory_table.jsonl
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

import provenance  # pylint: disable=g-import-not-at-top,wrong-import-position

from configs import imagenet_vit_b16, imagenet_vit_l16  # pylint: disable=g-import-not-at-top,wrong-import-position
from trainer import experiment, memory  # pylint: disable=g-import-not-at-top,wrong-import-position
from trainer.engines import spmd  # pylint: disable=g-import-not-at-top,wrong-import-position

RECIPES = {'vit_b16': imagenet_vit_b16, 'vit_l16': imagenet_vit_l16}
MESHES = {'data=8': (8, 1, 1), 'fsdp=8': (1, 8, 1), 'fsdp=4 x tensor=2': (1, 4, 2)}
GIB = 2**30


def measure(model_name: str, mesh_shape, batch_size: int) -> dict:
  config = RECIPES[model_name].get_config()
  config.data.source, config.data.augment = 'synthetic', 'none'
  config.model.dtype = 'bfloat16'  # the table's compute dtype on every platform
  config.data.num_synthetic_examples = batch_size
  config.batch_size = batch_size
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
  with tempfile.TemporaryDirectory() as workdir:
    exp = experiment.build_experiment(config, workdir)
    start = time.perf_counter()
    compiled, _ = spmd.compile_train_step(exp)
    compile_s = time.perf_counter() - start
  usage = memory.report(compiled, exp.abstract_state)
  total_state = sum(int(np.prod(x.shape)) * x.dtype.itemsize
                    for x in jax.tree.leaves((exp.abstract_state.params,
                                              exp.abstract_state.opt_state)))
  return {
      'model': model_name, 'mesh': dict(zip(('data', 'fsdp', 'tensor'), mesh_shape)),
      'batch_size': batch_size, 'dtype': config.model.dtype, 'remat': config.model.remat,
      'replicated_state_gib': total_state / GIB,
      'params_gib': usage.params / GIB, 'opt_state_gib': usage.opt_state / GIB,
      'state_per_device_gib': (usage.params + usage.opt_state) / GIB,
      'state_vs_replicated_over_8': (usage.params + usage.opt_state) / (total_state / 8),
      'temporaries_gib': usage.temporaries / GIB, 'peak_gib': usage.peak / GIB,
      'compile_s': compile_s,
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_size', type=int, default=64)
  parser.add_argument('--models', default='vit_b16,vit_l16')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  rows = []
  for model_name in args.models.split(','):
    for mesh_name, shape in MESHES.items():
      row = measure(model_name, shape, args.batch_size)
      row['mesh_name'] = mesh_name
      rows.append(results.write(row))
  print('\n| model | mesh | params + opt state / device (GiB) | x (replicated / 8) '
        '| temporaries (GiB) | peak (GiB) |', file=sys.stderr)
  print('|---|---|---|---|---|---|', file=sys.stderr)
  for r in rows:
    print(f"| {r['model']} | {r['mesh_name']} | {r['state_per_device_gib']:.3f} | "
          f"{r['state_vs_replicated_over_8']:.3f} | {r['temporaries_gib']:.3f} | "
          f"{r['peak_gib']:.3f} |", file=sys.stderr)


if __name__ == '__main__':
  main()
