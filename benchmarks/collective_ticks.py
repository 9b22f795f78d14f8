"""How long does one small collective take, call by call, and is that the
kernel's scheduler tick rather than the collective?

The mesh planner costs each collective at what the probe timed for it
(a latency, its bytes, its arrays). This times `--repeats` single calls of
an all-reduce of 1 KiB a device over every device of --layout (each call's
input the last call's output, so none overlaps the next) and reports their
spread: median, 10th and 90th percentiles, a histogram in 0.5 ms bins, and
the share of calls within 0.5 ms of a whole, non-zero number of the kernel's
scheduler ticks (1/CONFIG_HZ, read from the running kernel's config where it is
readable). Processes of a layout are pinned a core each, as
benchmarks/mesh_check.py lays them out; a call's time is the slowest
process's.

  .venv/bin/python benchmarks/collective_ticks.py --layout=1x8 --out=results/probe/collective_ticks.jsonl
  .venv/bin/python benchmarks/collective_ticks.py --layout=2x1 --out=results/probe/collective_ticks.jsonl
  .venv/bin/python benchmarks/collective_ticks.py --layout=2x4 --out=results/probe/collective_ticks.jsonl

One JSON line per layout with its provenance (benchmarks/provenance.py);
--out also appends it to a file.
"""

import argparse
import gzip
import os
import platform
import statistics
import sys
import time

import process_layout  # benchmarks/process_layout.py, beside this script
import provenance  # benchmarks/provenance.py, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FLOATS_PER_DEVICE = 256  # 1 KiB of float32: latency, not bandwidth
BIN_S = 0.5e-3
NEAR_S = 0.5e-3  # "on a tick": within this of a whole number of ticks


def kernel_hz(config_text: str) -> int | None:
  """CONFIG_HZ of a kernel config's text; None when it has none (pure)."""
  for line in config_text.splitlines():
    if line.startswith('CONFIG_HZ='):
      return int(line.split('=', 1)[1])
  return None


def running_kernel_hz() -> int | None:
  """The running kernel's CONFIG_HZ, from /proc/config.gz or /boot; None
  where neither is readable."""
  for path in ('/proc/config.gz', f'/boot/config-{platform.release()}'):
    try:
      opener = gzip.open if path.endswith('.gz') else open
      with opener(path, 'rt') as f:
        return kernel_hz(f.read())
    except OSError:
      continue
  return None


def histogram(durations_s: list[float], bin_s: float = BIN_S) -> list[int]:
  """Counts of `durations_s` in bins [k x bin_s, (k+1) x bin_s) from 0 up to
  the bin of the longest (pure)."""
  counts = [0] * (int(max(durations_s) / bin_s) + 1)
  for d in durations_s:
    counts[int(d / bin_s)] += 1
  return counts


def share_on_ticks(durations_s: list[float], tick_s: float, near_s: float = NEAR_S) -> float:
  """The share of `durations_s` within near_s of k ticks, k >= 1 (pure)."""
  on = [d for d in durations_s
        if round(d / tick_s) >= 1 and abs(d - round(d / tick_s) * tick_s) <= near_s]
  return len(on) / len(durations_s)


def worker(args) -> None:
  process_layout.initialize(args)
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np
  from probe import processes
  n = jax.device_count()
  mesh = jax.make_mesh((n,), ('d',), axis_types=(jax.sharding.AxisType.Explicit,))
  spec = jax.P('d')
  program = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, 'd') / n, mesh=mesh,
                                  in_specs=spec, out_specs=spec))
  x = jax.make_array_from_callback(
      (n, FLOATS_PER_DEVICE), jax.NamedSharding(mesh, spec),
      lambda index: np.ones((1, FLOATS_PER_DEVICE), np.float32))
  for _ in range(5):
    x = jax.block_until_ready(program(x))
  processes.barrier()
  durations = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    x = jax.block_until_ready(program(x))
    durations.append(time.perf_counter() - start)
  everyone = processes.gather(durations)
  process_layout.write_result(args, {
      'durations_s': [max(p[i] for p in everyone) for i in range(args.repeats)],
      'devices': n})


def main():
  parser = argparse.ArgumentParser()
  process_layout.add_arguments(parser, default_layout='2x4', default_repeats=200)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  if args.worker:
    worker(args)
    return
  import numpy as np  # pylint: disable=g-import-not-at-top
  results = provenance.Results(args.out)
  measured = process_layout.run(__file__, args.layout, args.repeats)
  durations = measured['durations_s']
  hz = running_kernel_hz()
  results.write({
      'layout': args.layout, 'devices': measured['devices'], 'calls': len(durations),
      'bytes_per_device': 4 * FLOATS_PER_DEVICE, 'median_s': statistics.median(durations),
      'p10_s': float(np.percentile(durations, 10)),
      'p90_s': float(np.percentile(durations, 90)),
      'histogram_bin_s': BIN_S, 'histogram': histogram(durations), 'kernel_hz': hz,
      'share_on_ticks': share_on_ticks(durations, 1 / hz) if hz else None})


if __name__ == '__main__':
  main()
