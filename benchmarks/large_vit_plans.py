"""The mesh planner's answer for the large ViTs on 8 and 64 GPUs of 80 and 141 GB.

  .venv/bin/python benchmarks/large_vit_plans.py --devices=64 --out=results/plan/large_vits_64.jsonl

For ViT-H/14, ViT-g/14 and ViT-G/14 (vit_h14, vit_g14, vit_bigg14) at 224
px, 32 images per GPU, AdamW as configs/imagenet_vit_l16.py trains, on
hosts of 8 H100-class GPUs (CLUSTER: 989 TFLOP/s bfloat16 peak at the
default 40% utilisation, NVLink at 3600 Gbit/s per direction, eight 400
Gbit/s NICs a host), runs `--mode=plan --config.plan.parallelism=mesh` with
the devices emulated on this CPU. A step fits when its peak is within the
budget docs/gpus.md uses (cli/gpu_settings.py's budget_gib: 90% of
the device, the trainer's GPU pool, less a 10% margin: 60.35 GiB of an 80
GB GPU, 106.37 GiB of a 141 GB one). Each (model, devices) pair plans in one
work dir, so the second device memory reuses the first's compiles
(mesh_compiles.jsonl); --workdirs=DIR keeps those dirs, and a later run
with the same DIR reuses every compile they hold. One record per plan: the fastest mesh that fits and
its terms, the runners-up, the command that runs it, and how many compiles
it took, with the provenance of benchmarks/provenance.py. Nothing here runs
on a GPU: step times are predictions from FLOPs and link rates.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import provenance
from cli import gpu_settings

MODELS = ('vit_h14', 'vit_g14', 'vit_bigg14')
DEVICES = (8, 64)
CAPACITIES_GB = (80, 141)
MARGIN = 0.1  # docs/gpus.md's margin for what XLA's analysis cannot see
PER_DEVICE_BATCH = 32
CLUSTER = ['--config.plan.devices_per_host=8', '--config.plan.device_tflops=989',
           '--config.plan.intra_host_gbps=3600', '--config.plan.link_bandwidth_gbps=3200']
_KEPT = ('name', 'step_s', 'compute_s', 'communication_s', 'peak', 'params', 'opt_state',
         'temporaries', 'mesh.data', 'mesh.fsdp', 'mesh.tensor', 'mesh.shard_update',
         'model.remat', 'grad_accum_steps')


def budget_gib(capacity_gb: float) -> float:
  fraction = float(gpu_settings.MEMORY_FRACTION[1])
  return round(gpu_settings.budget_gib(capacity_gb, fraction, MARGIN), 2)


def plan_args(model: str, devices: int, memory_gib: float) -> list[str]:
  return ['--mode=plan', '--config=configs/imagenet_vit_l16.py', f'--config.model.name={model}',
          f'--config.batch_size={PER_DEVICE_BATCH * devices}',
          '--config.plan.parallelism=mesh', f'--config.plan.num_workers={devices}',
          f'--config.plan.device_memory_gib={memory_gib:g}', *CLUSTER]


def record(args: list[str], capacity_gb: float, plan: dict, returncode: int,
           stderr: str) -> dict:
  rows = plan.get('fitting', [])
  return {'main_args': args, 'model': plan.get('model'), 'devices': plan['cluster']['devices'],
          'device_gb': capacity_gb, 'budget_gib': plan['cluster']['device_memory_gib'],
          'global_batch': plan.get('global_batch'), 'returncode': returncode,
          'best': {k: rows[0][k] for k in _KEPT} if rows else None,
          'next': [{k: r[k] for k in ('name', 'step_s', 'peak')} for r in rows[1:3]],
          'fitting': len(rows), 'not_fitting': len(plan.get('not_fitting', [])),
          'not_climbed': len(plan.get('not_climbed', [])),
          'smallest_miss_peak': min((r['peak'] for r in plan.get('not_fitting', [])),
                                    default=None),
          'command_line': plan.get('command'), 'answers': plan.get('answers'),
          'compiles': plan.get('compiles'),
          'error': stderr.strip().splitlines()[-1] if returncode else None}


@contextlib.contextmanager
def _workdir(root: str, name: str):
  if not root:
    with tempfile.TemporaryDirectory() as workdir:
      yield workdir
    return
  workdir = os.path.join(root, name)
  os.makedirs(workdir, exist_ok=True)
  yield workdir


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--models', default=','.join(MODELS))
  parser.add_argument('--devices', default=','.join(map(str, DEVICES)))
  parser.add_argument('--capacities_gb', default=','.join(map(str, CAPACITIES_GB)))
  parser.add_argument('--workdirs', default='', metavar='DIR',
                      help='keep each (model, devices) work dir under DIR, so that a '
                           'later run there reuses its compiles; default: temporary')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  for model in args.models.split(','):
    for devices in map(int, args.devices.split(',')):
      env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3',
                 XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}')
      with _workdir(args.workdirs, f'{model}_{devices}') as workdir:
        for capacity in map(float, args.capacities_gb.split(',')):
          main_args = plan_args(model, devices, budget_gib(capacity))
          run = subprocess.run([sys.executable, 'main.py', f'--workdir={workdir}', *main_args],
                               cwd=provenance.REPO, env=env, capture_output=True, text=True,
                               check=False)
          path = os.path.join(workdir, 'plan.json')
          if run.returncode not in (0, 2) or not os.path.exists(path):
            sys.stderr.write(run.stderr[-3000:])
            sys.exit(run.returncode or 1)
          with open(path) as f:
            plan = json.load(f)
          os.remove(path)
          results.write(record(main_args, capacity, plan, run.returncode, run.stderr))


if __name__ == '__main__':
  main()
