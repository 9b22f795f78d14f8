"""How closely the PS engine's emulated links pace one transfer: measured
wall time against the model's X/B + latency, on links idle before it.

    .venv/bin/python benchmarks/link_pacing.py --out=results/link_pacing/link_pacing.jsonl

One record per message size and bandwidth: the median, min and max of
`--repeats` transfers of X bytes between two fresh interfaces, each after
50 ms of idle, and their error against X/B + latency
(trainer/engines/emulation/link.py; docs/ps-engine.md). Prints JSON lines with
their provenance (benchmarks/provenance.py); --out also appends them to a file.
"""

import statistics
import sys
import time

from absl import app
from absl import flags
import numpy as np

import provenance  # benchmarks/provenance.py, beside this script

sys.path.insert(0, provenance.REPO)
from core import units  # pylint: disable=g-import-not-at-top,wrong-import-position
from trainer.engines.emulation import link  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_string('megabytes', '0.5,2.5,10,40', 'Message sizes, MB.')
flags.DEFINE_string('bandwidths_gbps', '1,8', 'Link bandwidths, Gbit/s.')
flags.DEFINE_float('latency_ms', 0.05, 'One-way latency, ms.')
flags.DEFINE_integer('repeats', 5, 'Transfers per cell.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  results = provenance.Results(FLAGS.out)
  for gbps in (float(g) for g in FLAGS.bandwidths_gbps.split(',')):
    for megabytes in (float(m) for m in FLAGS.megabytes.split(',')):
      nbytes = int(megabytes * 1e6) // 4 * 4
      source = np.ones(nbytes // 4, np.float32)
      target = np.zeros_like(source)
      expected = nbytes / units.gbps_to_bytes_per_s(gbps) + FLAGS.latency_ms / 1e3
      times = []
      for _ in range(FLAGS.repeats):
        src = link.Interface('worker', gbps, FLAGS.latency_ms)
        dst = link.Interface('shard', gbps, FLAGS.latency_ms)
        time.sleep(0.05)  # idle links
        start = time.perf_counter()
        link.transfer(src, dst, [(target, source)])
        times.append(time.perf_counter() - start)
      median = statistics.median(times)
      results.write({'bandwidth_gbps': gbps, 'megabytes': nbytes / 1e6,
                     'latency_ms': FLAGS.latency_ms, 'expected_s': expected,
                     'median_s': median, 'min_s': min(times), 'max_s': max(times),
                     'error_percent': 100 * (median / expected - 1)})


if __name__ == '__main__':
  app.run(main)
