"""A/B of speed changes in one run: `main.py --mode=bench` per variant, interleaved.

Each variant is a set of extra main.py flags and environment settings. The
variants run in turn, `--rounds` times (A B A B ...), so that drift of the
machine during the run hits them alike; each run is a fresh process, so
compile time counts as a user would see it. Prints one JSON line per run and
a summary line per variant (median over rounds), each with its provenance
(benchmarks/provenance.py) and, with --out, appends them to a file.

  .venv/bin/python benchmarks/speed_ab.py \
      --common='--config.model.name=resnet18 --config.model.width=0 \
                --config.data.image_size=64 --config.batch_size=32' \
      --variant='xla: --config.model.conv_form=xla' \
      --variant='by_shape: --config.model.conv_form=by_shape' \
      --out=results/speed/resnet18_64px.jsonl

A variant's settings may include ENV:NAME=VALUE to set an environment
variable (for example ENV:XLA_FLAGS=--xla_cpu_multi_thread_eigen=false),
and TREE:PATH to run another checkout's main.py (say, `git worktree add
/tmp/before HEAD~1` for the code before a change).
"""

import os
import shlex
import statistics

from absl import app
from absl import flags

import bench_runs  # benchmarks/bench_runs.py, beside this script
import provenance  # benchmarks/provenance.py, beside this script

flags.DEFINE_string('common', '', 'main.py flags every variant gets.')
flags.DEFINE_multi_string('variant', [], 'NAME: flags (and ENV:K=V settings) of a variant.')
flags.DEFINE_integer('rounds', 2, 'Runs of each variant, interleaved.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
FLAGS = flags.FLAGS

_SUMMARY_KEYS = ('compile_s', 'images_per_sec', 'step_time_median_s', 'mfu',
                 'peak_tflops', 'model_gflops_per_image', 'input_wait_fraction')


def parse_variant(text: str) -> tuple[str, list[str], dict[str, str], str]:
  """(name, main.py flags, environment, checkout) of a --variant."""
  name, sep, rest = text.partition(':')
  if not sep or not name.strip():
    raise app.UsageError(f'--variant={text!r}: expected NAME: FLAGS')
  args, env, tree = [], {}, bench_runs.ROOT
  for token in shlex.split(rest):
    if token.startswith('ENV:'):
      key, _, value = token[4:].partition('=')
      env[key] = value
    elif token.startswith('TREE:'):
      tree = os.path.abspath(token[5:])
      if not os.path.isfile(os.path.join(tree, 'main.py')):
        raise app.UsageError(f'--variant={text!r}: {tree} has no main.py')
    else:
      args.append(token)
  return name.strip(), args, env, tree


def main(argv):
  del argv
  variants = [parse_variant(v) for v in FLAGS.variant]
  if not variants:
    raise app.UsageError('give at least one --variant')
  results = provenance.Results(FLAGS.out)
  runs = {name: [] for name, *_ in variants}
  for round_index in range(FLAGS.rounds):
    for name, args, env, tree in variants:
      record = {'variant': name, 'round': round_index,
                **bench_runs.run_bench([*shlex.split(FLAGS.common), *args], env, tree)}
      runs[name].append(record)
      results.write(record)
  for name, records in runs.items():
    summary = {'variant': name, 'summary': 'median', 'rounds': len(records),
               **{k: statistics.median(r[k] for r in records) for k in _SUMMARY_KEYS}}
    results.write(summary)


if __name__ == '__main__':
  app.run(main)
