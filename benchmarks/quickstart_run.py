"""`make quickstart`'s training run, then `--mode=eval` on it: time and accuracy.

  .venv/bin/python benchmarks/quickstart_run.py --out=results/quickstart/runs.jsonl

Runs README.md's quickstart command (`main.py --config=configs/quickstart.py`)
in a fresh work dir with this interpreter, the shapes data cached as a
second run finds it, then `main.py --workdir=... --mode=eval` on that work
dir, and writes one record: the training process's wall time, the last line
it logs (`Final eval at step ...`), the final evaluation's top-1 from
metrics.jsonl, the run's goodput ledger (goodput.json: where its wall time
went, docs/goodput.md) and the eval mode's JSON line, with the provenance of
benchmarks/provenance.py. Exits 1 when either command fails.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import provenance
from trainer import goodput

RECIPE = 'configs/quickstart.py'


def _final_eval(workdir: str) -> dict:
  """The last eval record of metrics.jsonl."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    evals = [r for r in map(json.loads, f) if r.get('split') == 'eval']
  return evals[-1]


def _last_line_with(text: str, needle: str) -> str:
  lines = [line for line in text.splitlines() if needle in line]
  return lines[-1].split('] ', 1)[-1] if lines else ''


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  with tempfile.TemporaryDirectory() as scratch:
    workdir = os.path.join(scratch, 'quickstart')
    start = time.perf_counter()
    train = subprocess.run([sys.executable, 'main.py', f'--config={RECIPE}',
                            f'--workdir={workdir}'], cwd=provenance.REPO,
                           capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - start
    sys.stderr.write(train.stderr[-2000:])
    if train.returncode:
      sys.exit(1)
    evaluation = subprocess.run([sys.executable, 'main.py', f'--workdir={workdir}',
                                 '--mode=eval'], cwd=provenance.REPO,
                                capture_output=True, text=True, check=False)
    if evaluation.returncode:
      sys.stderr.write(evaluation.stderr[-2000:])
      sys.exit(1)
    final = _final_eval(workdir)
    results.write({
        'recipe': RECIPE,
        'wall_s': round(wall_s, 1),
        'final_step': final['step'],
        'final_top1': final['accuracy'],
        'final_eval_log_line': _last_line_with(train.stderr, 'Final eval'),
        'eval_mode_line': json.loads(evaluation.stdout.strip().splitlines()[-1]),
        'goodput': goodput.summary(goodput.read(workdir)),
    })


if __name__ == '__main__':
  main()
