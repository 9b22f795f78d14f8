"""Three engines on the same model, data and devices: SPMD, all-reduce, PS.

For each model and each worker count N_w, one child process with N_w
emulated devices measures the SPMD engine (data parallel over those devices,
XLA's collectives in memory), and for every link bandwidth the all-reduce
engine (a ring over paced links) and the synchronous PS engine at every
shard count N_ps (over the same paced links).
Each configuration is compiled, warmed up, then timed over --steps steps on
synthetic data; a line of JSON per configuration, with its provenance
(benchmarks/provenance.py), goes to standard output, and --out also appends
the lines to a file. benchmarks/make_plots.py draws images/s from them.

  .venv/bin/python benchmarks/engine_contrast.py \
      --out=results/engine_contrast/results.jsonl
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name -> (config overrides, global batch)
MODELS = {
    'quickstart': ({'model.name': 'resnet18', 'model.width': 16,
                    'data.image_size': 32}, 128),
    'resnet18_64px': ({'model.name': 'resnet18', 'model.width': 0,
                       'data.image_size': 64}, 32),
}


def _config(model: str, engine: str, num_shards: int, bandwidth_gbps: float):
  from configs import default  # pylint: disable=g-import-not-at-top
  overrides, batch = MODELS[model]
  config = default.get_config()
  config.data.source = 'synthetic'
  config.data.num_synthetic_classes = 10
  config.data.num_synthetic_examples = batch * 4
  config.batch_size = batch
  config.num_train_steps = 1000
  config.engine = engine
  config.ps.num_shards = num_shards
  config.network.bandwidth_gbps = bandwidth_gbps
  for key, value in overrides.items():
    group, name = key.split('.')
    config[group][name] = value
  return config


def _measure(config, steps: int, warmup: int) -> dict:
  """Median step time and the mean time split over `steps` timed steps (the
  study's measurement), and the time the engine took to compile."""
  from trainer import engines, experiment  # pylint: disable=g-import-not-at-top
  from planner import study  # pylint: disable=g-import-not-at-top
  exp = experiment.build_experiment(config, '/nonexistent')
  compile_s = []

  def create_engine(exp):
    start = time.perf_counter()
    engine = engines.create_engine(exp)
    compile_s.append(time.perf_counter() - start)
    return engine

  step_s, split = study.measure_step_s(exp, steps, create_engine, warmup=warmup)
  return {'step_s': step_s, 'images_per_sec': config.batch_size / step_s,
          'compile_s': compile_s[0], **split}


def child(args) -> None:
  """Runs in a process whose device count is the worker count."""
  import jax  # pylint: disable=g-import-not-at-top
  from planner import measure  # pylint: disable=g-import-not-at-top
  measure.reuse_compilations(args.cache_dir)
  num_workers = jax.device_count()
  cells = [('spmd', 0, 0.0)]
  for bandwidth in args.bandwidths:
    cells += [('allreduce', 0, bandwidth)] + [('ps', n, bandwidth) for n in args.shards]
  for engine, shards, bandwidth in cells:
    config = _config(args.model, engine, max(shards, 1), bandwidth)
    result = _measure(config, args.steps, args.warmup)
    print(json.dumps({'model': args.model, 'engine': engine, 'num_workers': num_workers,
                      'num_shards': shards, 'bandwidth_gbps': bandwidth,
                      'batch_size': config.batch_size, **result}), flush=True)


def parent(args) -> None:
  results = provenance.Results(args.out)
  cache_dir = tempfile.mkdtemp(prefix='engine_contrast_cache_')
  for model in args.models:
    for num_workers in args.workers:
      env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3',
                 XLA_FLAGS=f'--xla_force_host_platform_device_count={num_workers}')
      command = [sys.executable, os.path.abspath(__file__), '--child',
                 f'--cache_dir={cache_dir}',
                 f'--model={model}', f'--steps={args.steps}', f'--warmup={args.warmup}',
                 '--shards=' + ','.join(map(str, args.shards)),
                 '--bandwidths=' + ','.join(map(str, args.bandwidths))]
      result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
      if result.returncode:
        sys.exit(f'{model} with {num_workers} workers failed:\n{result.stderr[-3000:]}')
      for line in result.stdout.splitlines():
        if line.startswith('{'):
          results.write(json.loads(line))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--model', help=argparse.SUPPRESS)
  parser.add_argument('--cache_dir', help=argparse.SUPPRESS)
  parser.add_argument('--models', type=lambda s: s.split(','),
                      default=list(MODELS))
  parser.add_argument('--workers', type=lambda s: [int(x) for x in s.split(',')],
                      default=[2, 4, 8])
  parser.add_argument('--shards', type=lambda s: [int(x) for x in s.split(',')],
                      default=[1, 2, 4, 8])
  parser.add_argument('--bandwidths', type=lambda s: [float(x) for x in s.split(',')],
                      default=[0.0, 1.0, 10.0], help='Gbit/s per link; 0: unlimited')
  parser.add_argument('--steps', type=int, default=3)
  parser.add_argument('--warmup', type=int, default=2)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  sys.path.insert(0, REPO)
  child(args) if args.child else parent(args)  # pylint: disable=expression-not-assigned


if __name__ == '__main__':
  main()
