"""Per-device memory of the recipes' train steps, from XLA's compiled analysis.

Compiles (does not run) the real train step on 8 emulated CPU devices, in
bfloat16, and reads the compiled memory analysis: parameter and optimiser
bytes per device from the state's shardings, temporaries and peak from XLA.
Prints one JSON line per compile, with its provenance
(benchmarks/provenance.py), and a markdown table on standard error; --out
also appends the lines to a file. Two sweeps:

- ViT-B/16 and ViT-L/16 on three meshes (data=8, fsdp=8, fsdp=4 x tensor=2)
  at one global batch (--batch_size, --models):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv/bin/python benchmarks/memory_table.py --batch_size=64 \
        --out=results/memory/memory_table.jsonl

- each recipe (--recipes) on its own mesh, as a GPU would run it (bfloat16,
  convolutions in XLA's form), at several batches per device
  (--per_device_batch); the peak is fitted as an affine function of the
  batch per device, and the largest batch per device whose peak fits each
  device of --fit_gb (within --mem_fraction of it, the pool JAX's allocator
  takes in the trainer's GPU runs, less --margin of that) is computed from
  the fit and confirmed by one more compile (and, should that one not fit,
  at a smaller batch until one does; docs/gpus.md). --fit_from reuses the
  compiles a results file already holds, to refit for other devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        .venv/bin/python benchmarks/memory_table.py \
        --recipes=resnet50,vit_b16,vit_l16 --per_device_batch=32,128,512 \
        --fit_gb=80,141 --out=results/memory/gpu_fit.jsonl
"""

import argparse
import json
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

from cli import gpu_settings  # pylint: disable=g-import-not-at-top,wrong-import-position
from configs import imagenet_resnet50, imagenet_vit_b16, imagenet_vit_l16  # pylint: disable=g-import-not-at-top,wrong-import-position
from configs import values  # pylint: disable=g-import-not-at-top,wrong-import-position
from trainer import experiment, memory  # pylint: disable=g-import-not-at-top,wrong-import-position
from trainer.engines import spmd  # pylint: disable=g-import-not-at-top,wrong-import-position

RECIPES = {'resnet50': imagenet_resnet50, 'vit_b16': imagenet_vit_b16,
           'vit_l16': imagenet_vit_l16}
MESHES = {'data=8': (8, 1, 1), 'fsdp=8': (1, 8, 1), 'fsdp=4 x tensor=2': (1, 4, 2)}
NUM_DEVICES = 8
GIB = 2**30
# The share of a GPU's memory that the trainer's GPU runs let JAX's
# allocator take (runtime.gpu_defaults; JAX's own default is 0.75); the rest
# holds the CUDA context and what NCCL and the CUDA libraries allocate
# themselves.
MEM_FRACTION = float(gpu_settings.MEMORY_FRACTION[1])


def mesh_name(shape) -> str:
  axes = [f'{axis}={size}' for axis, size in zip(('data', 'fsdp', 'tensor'), shape)
          if size != 1]
  return ' x '.join(axes) or 'one device'


def measure_config(config) -> dict:
  """One compile of `config`'s train step: its per-device memory in GiB."""
  config.data.source, config.data.augment = 'synthetic', 'none'
  config.data.num_synthetic_examples = config.batch_size
  with tempfile.TemporaryDirectory() as workdir:
    exp = experiment.build_experiment(config, workdir)
    start = time.perf_counter()
    compiled, _ = spmd.compile_train_step(exp)
    compile_s = time.perf_counter() - start
  usage = memory.report(compiled, exp.abstract_state)
  total_state = sum(int(np.prod(x.shape)) * x.dtype.itemsize
                    for x in jax.tree.leaves((exp.abstract_state.params,
                                              exp.abstract_state.opt_state)))
  shape = exp.mesh.devices.shape
  return {
      'model': config.model.name, 'mesh': dict(zip(('data', 'fsdp', 'tensor'), shape)),
      'batch_size': config.batch_size, 'dtype': config.model.dtype,
      'remat': config.model.remat,
      'replicated_state_gib': total_state / GIB,
      'params_gib': usage.params / GIB, 'opt_state_gib': usage.opt_state / GIB,
      'state_per_device_gib': (usage.params + usage.opt_state) / GIB,
      'state_vs_replicated_over_8': (usage.params + usage.opt_state) / (total_state / 8),
      'temporaries_gib': usage.temporaries / GIB, 'peak_gib': usage.peak / GIB,
      'compile_s': compile_s,
  }


def measure(model_name: str, mesh_shape, batch_size: int) -> dict:
  """The ViT sweep's case: a recipe on the given mesh at a global batch."""
  config = RECIPES[model_name].get_config()
  config.model.dtype = 'bfloat16'  # the table's compute dtype on every platform
  config.batch_size = batch_size
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
  return measure_config(config)


def measure_recipe(name: str, per_device_batch: int, dtype: str = 'bfloat16') -> dict:
  """A recipe's step on its own mesh as a GPU compiles it: model.dtype and
  model.conv_form as 'auto' resolves them on a GPU (models/registry.py,
  trainer/experiment.py) unless `dtype` says otherwise, the recipe's global
  batch replaced by per_device_batch on each batch-sharded device."""
  config = RECIPES[name].get_config()
  config.model.dtype, config.model.conv_form = dtype, 'xla'
  data, fsdp, _ = values.resolve_mesh_shape(config.mesh, NUM_DEVICES)
  recipe_batch_size = config.batch_size
  config.batch_size = per_device_batch * data * fsdp
  row = measure_config(config)
  row['mesh_name'] = mesh_name(tuple(row['mesh'].values()))
  return {'recipe': f'configs/{RECIPES[name].__name__.split(".")[-1]}.py',
          'recipe_batch_size': recipe_batch_size, 'per_device_batch': per_device_batch,
          'conv_form': config.model.conv_form, **row}


def affine_fit(rows: list[dict]) -> dict:
  """Least-squares peak = intercept + slope * per_device_batch, and how far
  each measured peak lies from it."""
  x = np.array([r['per_device_batch'] for r in rows], float)
  y = np.array([r['peak_gib'] for r in rows], float)
  slope, intercept = np.polyfit(x, y, 1)
  residuals = y - (intercept + slope * x)
  return {'fit_batches': [int(b) for b in x], 'peak_slope_gib_per_example': float(slope),
          'peak_intercept_gib': float(intercept),
          'fit_max_residual_gib': float(np.abs(residuals).max()),
          'fit_max_residual_fraction': float(np.abs(residuals / y).max())}


def largest_fitting_batch(fit: dict, budget: float, multiple: int = 1) -> int:
  """The fit's largest batch per device within budget, rounded down to a
  multiple of `multiple` (a recipe's batch-norm groups, each on one device)."""
  batch = int((budget - fit['peak_intercept_gib']) // fit['peak_slope_gib_per_example'])
  return batch - batch % multiple


def measured(path: str, name: str, dtype: str) -> dict[int, dict]:
  """Compiles of the recipe in dtype that a results file holds, by batch per
  device (the last of each)."""
  found = {}
  recipe = f'configs/{RECIPES[name].__name__.split(".")[-1]}.py'
  with open(path) as f:
    for line in f:
      r = json.loads(line) if line.strip() else {}
      if r.get('recipe') == recipe and 'fit' not in r and r.get('dtype') == dtype:
        found[r['per_device_batch']] = r
  return found


def fit_recipe(name: str, batches: list[int], capacities_gb: list[float], *,
               mem_fraction: float, margin: float, results, dtype: str = 'bfloat16',
               fit_from: str = '') -> list[dict]:
  """The recipe's sweep and, given capacities, its affine fit and per
  capacity the largest batch per device from the fit, confirmed by a compile
  at that batch. fit_from: a results file whose compiles at those batches
  are used instead of compiling again."""
  known = measured(fit_from, name, dtype) if fit_from else {}
  rows = [known.get(b) or results.write(measure_recipe(name, b, dtype)) for b in batches]
  if not capacities_gb:
    return rows
  fit = affine_fit(rows)
  fits = []
  for capacity in capacities_gb:
    budget = gpu_settings.budget_gib(capacity, mem_fraction, margin)
    group = RECIPES[name].get_config().model.bn_group_size or 1
    batch = largest_fitting_batch(fit, budget, group)
    predicted = fit['peak_intercept_gib'] + fit['peak_slope_gib_per_example'] * batch
    confirm = results.write(measure_recipe(name, batch, dtype))
    while confirm['peak_gib'] > budget and batch > group:  # the fit was too hopeful
      batch = int(batch * budget / confirm['peak_gib'])
      batch -= batch % group
      predicted = fit['peak_intercept_gib'] + fit['peak_slope_gib_per_example'] * batch
      confirm = results.write(measure_recipe(name, batch, dtype))
    fits.append(results.write({
        'fit': 'affine', 'model': rows[0]['model'], 'recipe': rows[0]['recipe'],
        'mesh': rows[0]['mesh'], 'mesh_name': rows[0]['mesh_name'], 'dtype': dtype,
        **fit, 'fit_records_from': fit_from or None,
        'capacity_gb': capacity, 'mem_fraction': mem_fraction,
        'margin': margin, 'budget_gib': budget,
        'largest_per_device_batch': batch, 'per_device_batch_multiple': group,
        'predicted_peak_gib': predicted,
        'confirmed_peak_gib': confirm['peak_gib'],
        'confirmed': confirm['peak_gib'] <= budget}))
  return rows + fits


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch_size', type=int, default=64,
                      help='the ViT sweep: global batch')
  parser.add_argument('--models', default='vit_b16,vit_l16',
                      help='the ViT sweep: models, each on every mesh')
  parser.add_argument('--recipes', default='',
                      help=f'the recipe sweep: some of {",".join(RECIPES)}, each on '
                           'its own mesh (replaces the ViT sweep)')
  parser.add_argument('--per_device_batch', default='32,128,512',
                      help='the recipe sweep: batches per device to compile and fit')
  parser.add_argument('--fit_gb', default='80,141',
                      help='the recipe sweep: device capacities in GB (10^9 bytes) to '
                           'find the largest batch per device for; empty: no fit')
  parser.add_argument('--dtype', default='bfloat16', choices=('bfloat16', 'float32'),
                      help='the recipe sweep: compute dtype (a GPU run: bfloat16)')
  parser.add_argument('--mem_fraction', type=float, default=MEM_FRACTION,
                      help='the recipe sweep: share of a device JAX\'s allocator takes '
                           '(the trainer\'s GPU runs: %(default)s)')
  parser.add_argument('--margin', type=float, default=0.1,
                      help='the recipe sweep: share of that held back for what the CPU '
                           'compile cannot see (docs/gpus.md)')
  parser.add_argument('--fit_from', default='', metavar='PATH',
                      help='the recipe sweep: take the compiles at --per_device_batch '
                           'from this results file where it has them')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  if args.recipes:
    rows = []
    for name in args.recipes.split(','):
      rows += fit_recipe(name, [int(b) for b in args.per_device_batch.split(',')],
                         [float(c) for c in args.fit_gb.split(',') if c],
                         mem_fraction=args.mem_fraction, margin=args.margin,
                         results=results, dtype=args.dtype, fit_from=args.fit_from)
    print_recipe_table(rows)
    return
  rows = []
  for model_name in args.models.split(','):
    for name, shape in MESHES.items():
      row = measure(model_name, shape, args.batch_size)
      row['mesh_name'] = name
      rows.append(results.write(row))
  print('\n| model | mesh | params + opt state / device (GiB) | x (replicated / 8) '
        '| temporaries (GiB) | peak (GiB) |', file=sys.stderr)
  print('|---|---|---|---|---|---|', file=sys.stderr)
  for r in rows:
    print(f"| {r['model']} | {r['mesh_name']} | {r['state_per_device_gib']:.3f} | "
          f"{r['state_vs_replicated_over_8']:.3f} | {r['temporaries_gib']:.3f} | "
          f"{r['peak_gib']:.3f} |", file=sys.stderr)


def print_recipe_table(rows: list[dict]) -> None:
  print('\n| model | mesh | batch / device | params | opt state | temporaries | peak '
        '(GiB) |', file=sys.stderr)
  print('|---|---|---|---|---|---|---|', file=sys.stderr)
  for r in rows:
    if 'fit' in r:
      print(f"| {r['model']} fits {r['capacity_gb']:g} GB: batch/device "
            f"{r['largest_per_device_batch']} (peak {r['confirmed_peak_gib']:.2f} of "
            f"{r['budget_gib']:.2f} GiB; fit residual {r['fit_max_residual_gib']:.3f} GiB)",
            file=sys.stderr)
    else:
      print(f"| {r['model']} | {r['mesh_name']} | {r['per_device_batch']} | "
            f"{r['params_gib']:.3f} | {r['opt_state_gib']:.3f} | "
            f"{r['temporaries_gib']:.3f} | {r['peak_gib']:.3f} |", file=sys.stderr)


if __name__ == '__main__':
  main()
