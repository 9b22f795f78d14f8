"""Does what a step pays per all-reduced array depend on the arrays' size?

The probe (probe/step_cost.py) fits a data-parallel step's extra time over
one device's, extra(k) = fixed + k x per_operand, on a tiny MLP whose k
gradient arrays are a few hundred bytes to 1 kB each; the planner adds each
model's bytes at the all-reduce's bus bandwidth (planner/from_probe.py). A
model's arrays are larger and unequal. This times the same step with the
MLP's hidden layers 16, 256 and 1024 wide (arrays of 1 kB, 256 kB and 4 MB)
at 2, 8 and 32 arrays, and beside it an all-reduce of one array at two sizes
(its bus bandwidth, as the probe fits it), on the processes and devices of
--layout, and compares each step's extra time with what the planner's sum
predicts from the narrowest MLP's fit and the bandwidth: fixed + k x
per_operand + bytes x 2(n-1)/n / busbw.

One JSON line per (width, arrays) with its provenance
(benchmarks/provenance.py), then one per width with its own fit; --out also
appends them to a file.

  .venv/bin/python benchmarks/array_cost.py --layout=2x1 --out=results/probe/array_cost.jsonl
  .venv/bin/python benchmarks/array_cost.py --layout=1x2 --out=results/probe/array_cost.jsonl
"""

import argparse
import os
import sys

import process_layout  # benchmarks/process_layout.py, beside this script
import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

WIDTHS = (16, 256, 1024)
OPERANDS = (2, 8, 32)
BANDWIDTH_BYTES = (1 << 20, 16 << 20)  # the all-reduce's two message sizes


def _fit(ks, extras):
  """(fixed, per_operand) of extra = fixed + k x per_operand, as the probe
  fits its step (probe/fit.py: relative residuals, both >= 0)."""
  from probe import fit as fit_lib  # pylint: disable=g-import-not-at-top
  fixed, per_operand, _ = fit_lib.fit_line(ks, [max(e, 1e-7) for e in extras])
  return fixed, per_operand


def worker(args) -> None:
  process_layout.initialize(args)
  # pylint: disable=g-import-not-at-top
  import jax
  from probe import collectives
  from probe import processes
  from probe import step_cost
  times = {}
  for width in WIDTHS:
    for k in OPERANDS:
      everywhere = step_cost.TinyStep(jax.devices(), k, width)
      alone = step_cost.TinyStep(jax.local_devices()[:1], k, width)
      processes.barrier()
      all_s = everywhere.median_s(args.repeats)
      processes.barrier()
      one_s = alone.median_s(args.repeats)
      times[f'{width},{k}'] = (all_s, one_s)
  bandwidth = []
  for size in BANDWIDTH_BYTES:
    program, x = collectives.compile_program('all_reduce', jax.devices(), size, 4)
    processes.barrier()
    bandwidth.append(collectives.time_s(program, x, args.repeats, 4))
  # The slowest process's figures, as the probe records them.
  everyone = processes.gather({'times': times, 'bandwidth': bandwidth})
  process_layout.write_result(args, {
      'times': {key: [max(p['times'][key][i] for p in everyone) for i in (0, 1)]
                for key in times},
      'bandwidth': [max(p['bandwidth'][i] for p in everyone) for i in (0, 1)],
      'devices': jax.device_count()})


def main():
  parser = argparse.ArgumentParser()
  process_layout.add_arguments(parser, default_layout='2x1', default_repeats=30)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  if args.worker:
    worker(args)
    return
  results = provenance.Results(args.out)
  measured = process_layout.run(__file__, args.layout, args.repeats)
  n = measured['devices']
  from probe import step_cost  # pylint: disable=g-import-not-at-top
  from probe import fit as fit_lib  # pylint: disable=g-import-not-at-top
  algbw = fit_lib.fit_latency_bandwidth(BANDWIDTH_BYTES, measured['bandwidth']).bytes_per_s
  busbw = algbw * fit_lib.bus_factor('all_reduce', n)
  extras = {key: all_s - one_s for key, (all_s, one_s) in measured['times'].items()}
  narrow = WIDTHS[0]
  fixed, per_operand = _fit(OPERANDS, [extras[f'{narrow},{k}'] for k in OPERANDS])
  for width in WIDTHS:
    for k in OPERANDS:
      nbytes = step_cost.gradient_bytes(k, width)
      predicted = fixed + k * per_operand + nbytes * 2 * (n - 1) / n / busbw
      results.write({'kind': 'step', 'layout': args.layout, 'hidden': width, 'operands': k,
                     'gradient_bytes': nbytes, 'extra_s': extras[f'{width},{k}'],
                     'predicted_extra_s': predicted,
                     'error': predicted / extras[f'{width},{k}'] - 1,
                     'busbw_gbps': busbw * 8 / 1e9})
    own = _fit(OPERANDS, [extras[f'{width},{k}'] for k in OPERANDS])
    results.write({'kind': 'fit', 'layout': args.layout, 'hidden': width,
                   'fixed_s': own[0], 'per_operand_s': own[1],
                   'mean_array_bytes': step_cost.gradient_bytes(OPERANDS[-1], width) /
                   OPERANDS[-1]})


if __name__ == '__main__':
  main()
