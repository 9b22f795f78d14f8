"""What the goodput ledger costs a training step.

  .venv/bin/python benchmarks/goodput_cost.py --out=results/speed/goodput_cost.jsonl

The ledger's only per-step work is `Ledger.after_step` (trainer/goodput.py);
the rest happens at progress lines. This times that call (the median of
`--rounds` runs of `--calls` calls) and sets it beside the quickstart
recipe's step time from `main.py --mode=bench` (its median step, on this
machine, in the same run of the script): the share of a step the ledger
takes. One JSON record with the provenance of benchmarks/provenance.py.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import bench_runs
from benchmarks import provenance
from trainer import goodput

RECIPE = 'configs/quickstart.py'


def after_step_us(calls: int, rounds: int) -> float:
  """The median over `rounds` of the mean microseconds of one after_step."""
  ledger = goodput.Ledger(time.time())
  ledger.start_loop(0)
  per_call = []
  for _ in range(rounds):
    began = time.perf_counter()
    for step in range(calls):
      ledger.after_step(step, 0.0)
    per_call.append(1e6 * (time.perf_counter() - began) / calls)
  return statistics.median(per_call)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--calls', type=int, default=100_000)
  parser.add_argument('--rounds', type=int, default=5)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  cost_us = after_step_us(args.calls, args.rounds)
  bench = bench_runs.run_bench([f'--config={RECIPE}'])
  step_s = bench['step_time_median_s']
  results.write({'recipe': RECIPE, 'after_step_us': round(cost_us, 3),
                 'step_time_s': step_s, 'share_of_step': cost_us * 1e-6 / step_s})


if __name__ == '__main__':
  main()
