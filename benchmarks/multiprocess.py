"""Two processes of one device against one process of two devices.

The same model, global batch and synthetic data, trained by main.py as a
user runs it: one process with 2 emulated devices, and 2 processes with 1
device each through launch.py, the latter with the processes agreeing on
stops and time-based saves after every step (runtime.agree_every_steps=1:
one all-gather per step, which is what the stop check did before
coordination/agreement.py) and every 10 steps (the default). images/s is the
median of the logged intervals after the first (compilation and warm-up).
One JSON line per run, with its provenance (benchmarks/provenance.py), on
standard output (--out also appends them to a file), and a Markdown table
on standard error at the end.

  .venv/bin/python benchmarks/multiprocess.py --out=results/multiprocess/multiprocess.jsonl
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from trainer import metrics_log  # pylint: disable=wrong-import-position

MODELS = {
    'quickstart': ['--config=configs/quickstart.py', '--config.data.source=synthetic'],
    'resnet18_64px': ['--config=configs/quickstart.py', '--config.data.source=synthetic',
                      '--config.model.width=0', '--config.data.image_size=64',
                      '--config.batch_size=32'],
}
SETUPS = {
    '1 process x 2 devices': ('single', 10),
    '2 processes x 1 device, agree every step': ('launch', 1),
    '2 processes x 1 device, agree every 10 steps': ('launch', 10),
}


def run(model: str, setup: str, steps: int, log_every: int) -> dict:
  how, agree_every = SETUPS[setup]
  workdir = tempfile.mkdtemp(prefix='bench_mp_')
  args = [*MODELS[model], f'--workdir={workdir}', f'--config.num_train_steps={steps}',
          f'--config.log_every_steps={log_every}', '--config.eval_every_steps=100000',
          '--config.checkpoint.every_steps=100000',
          f'--config.runtime.agree_every_steps={agree_every}']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  if how == 'single':
    env['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
    command = [sys.executable, 'main.py', *args]
  else:
    env.pop('XLA_FLAGS', None)
    command = [sys.executable, 'launch.py', '--processes=2', '--devices=1', '--', *args]
  result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
  if result.returncode != 0:
    raise RuntimeError(f'{setup} failed: {result.stderr[-2000:]}')
  train = [r for r in metrics_log.read(workdir) if r['split'] == 'train'][1:]
  return {'model': model, 'setup': setup, 'steps': steps,
          'images_per_sec': statistics.median(r['images_per_sec'] for r in train),
          'step_time_s': statistics.median(r['step_time_s'] for r in train)}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--log_every', type=int, default=10)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  rows = []
  for model in MODELS:
    for setup in SETUPS:
      rows.append(results.write(run(model, setup, args.steps, args.log_every)))
  print('\n| model | setup | images/s | step time (ms) |\n|---|---|---|---|',
        file=sys.stderr)
  for r in rows:
    print(f"| {r['model']} | {r['setup']} | {r['images_per_sec']:.0f} | "
          f"{1e3 * r['step_time_s']:.1f} |", file=sys.stderr)


if __name__ == '__main__':
  main()
