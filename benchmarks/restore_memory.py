"""Peak host memory of the restores of fine-tuning and of --mode=eval.

ViT-L/16 with AdamW (configs/imagenet_vit_l16.py), its state split over
fsdp=8 emulated CPU devices, whose memory is this process's. First a source
checkpoint is written once: a fresh state, parameters and optimiser state,
as a run saves it. Then each case runs in a fresh process that does only
what its restore needs and reports its resident memory before the restore
and its peak during it (VmHWM, reset just before):

  finetune  the new run's fresh state, created sharded (as train.py does),
            then init_from.initialize_from from the source;
  eval      --mode=eval's restore of the checkpoint (Checkpointer.
            restore_weights; code without it restored the whole state with
            Checkpointer.restore, as evaluate.py then did).

A case whose resident memory passes --max_rss_gib is stopped, so that a
restore that would not fit does not take the machine down; it reports the
cap it passed. One JSON line per case, with its provenance
(benchmarks/provenance.py); --out also appends them to a file.

    .venv/bin/python benchmarks/restore_memory.py --model=vit_b16 \
        --out=results/memory/restore_memory.jsonl   # then --model=vit_l16

The source checkpoints stay in runs/restore_memory/ (4.6 GB for both
models) for the next run, e.g. of the same script in an export of older
code (`git archive COMMIT`, with this script and provenance.py copied in,
run with --dir pointing at these checkpoints and --label=COMMIT).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

GIB = 2**30


def _status_kib(field: str, pid='self') -> int:
  with open(f'/proc/{pid}/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1])
  return 0


def _reset_peak() -> None:
  """Makes VmHWM the current resident size, so that it measures what follows."""
  with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')


def _config(model: str, source: str = ''):
  from configs import imagenet_vit_b16, imagenet_vit_l16  # pylint: disable=g-import-not-at-top
  config = {'vit_b16': imagenet_vit_b16, 'vit_l16': imagenet_vit_l16}[model].get_config()
  config.data.source, config.data.augment = 'synthetic', 'none'
  config.data.num_synthetic_examples = 8
  config.batch_size = config.eval.batch_size = 8
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 1, 8, 1
  config.init.from_workdir = source
  return config


def _experiment():
  """trainer/experiment.py: build_experiment (trainer/setup.py in older code)."""
  try:
    from trainer import experiment  # pylint: disable=g-import-not-at-top
  except ImportError:
    from trainer import setup as experiment  # pylint: disable=g-import-not-at-top
  return experiment


def write_source(model: str, workdir: str) -> None:
  """A checkpoint of a fresh state (parameters + AdamW state) in `workdir`."""
  from trainer import checkpointing, state as state_lib  # pylint: disable=g-import-not-at-top
  exp = _experiment().build_experiment(_config(model), workdir)
  state = state_lib.create_train_state(exp.model, exp.tx, exp.config.data.image_size,
                                       exp.state_shardings, seed=0)
  checkpointer = checkpointing.Checkpointer(workdir)
  checkpointer.save(1, state, {'step': 1})
  checkpointer.close()


def measure(case: str, model: str, source: str, scratch: str) -> dict:
  """Runs in the child: one case's restore, with its memory."""
  import jax  # pylint: disable=g-import-not-at-top
  from trainer import checkpointing, init_from, state as state_lib  # pylint: disable=g-import-not-at-top
  config = _config(model, source)
  exp = _experiment().build_experiment(config, scratch)
  if case == 'finetune':
    state = state_lib.create_train_state(exp.model, exp.tx, config.data.image_size,
                                         exp.state_shardings, seed=1)
    jax.block_until_ready(state)
    _reset_peak()
    before = _status_kib('VmRSS')
    start = time.perf_counter()
    state = init_from.initialize_from(state, config.init)
  else:
    checkpointer = checkpointing.Checkpointer(source)
    _reset_peak()
    before = _status_kib('VmRSS')
    start = time.perf_counter()
    restore = getattr(checkpointer, 'restore_weights', None)
    state = (restore(1, exp.abstract_state) if restore is not None
             else checkpointer.restore(1, exp.abstract_state)[0])
  jax.block_until_ready(state)
  seconds = time.perf_counter() - start
  state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  peak = _status_kib('VmHWM')
  return {'rss_before_gib': before * 1024 / GIB, 'peak_rss_gib': peak * 1024 / GIB,
          'restore_peak_over_before_gib': (peak - before) * 1024 / GIB,
          'restore_s': seconds, 'state_after_gib': state_bytes / GIB,
          'opt_state_restored': getattr(state, 'opt_state', None) is not None}


def run_case(case: str, model: str, source: str, scratch: str, cap_gib: float) -> dict:
  """`measure` in a fresh process, stopped if its memory passes `cap_gib`."""
  process = subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), f'--child={case}', f'--model={model}',
       f'--dir={os.path.dirname(source)}'],
      stdout=subprocess.PIPE, text=True)
  peak = 0
  while process.poll() is None:
    try:
      rss = _status_kib('VmRSS', process.pid) * 1024 / GIB
    except (FileNotFoundError, ProcessLookupError):
      break
    peak = max(peak, rss)
    if rss > cap_gib:
      process.kill()
      process.wait()
      return {'stopped_above_gib': cap_gib, 'peak_rss_gib': f'> {cap_gib}'}
    time.sleep(0.1)
  out, _ = process.communicate()
  if process.returncode:
    return {'failed': process.returncode, 'peak_rss_seen_gib': peak}
  return json.loads(out.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--dir', default=os.path.join(REPO, 'runs', 'restore_memory'),
                      help='where the source checkpoints are written (and kept)')
  parser.add_argument('--model', default='vit_l16', choices=('vit_b16', 'vit_l16'))
  parser.add_argument('--cases', default='eval,finetune')
  parser.add_argument('--max_rss_gib', type=float, default=16.0)
  parser.add_argument('--label', default='',
                      help="what the rows say ran; default: this checkout's commit")
  parser.add_argument('--child', default='', help=argparse.SUPPRESS)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  source = os.path.join(args.dir, f'source_{args.model}')
  scratch = os.path.join(args.dir, 'scratch')
  if args.child:
    print(json.dumps(measure(args.child, args.model, source, scratch)), flush=True)
    return
  results = provenance.Results(args.out)
  if not os.path.isdir(os.path.join(source, 'checkpoints', '1')):
    start = time.perf_counter()
    write_source(args.model, source)
    print(f'# wrote the source checkpoint in {time.perf_counter() - start:.0f} s',
          file=sys.stderr)
  label = args.label or subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO,
                                       capture_output=True, text=True).stdout.strip()
  for case in args.cases.split(','):
    results.write({'case': case, 'model': args.model, 'mesh': 'fsdp=8', 'code': label,
                   **run_case(case, args.model, source, scratch, args.max_rss_gib)})


if __name__ == '__main__':
  main()
