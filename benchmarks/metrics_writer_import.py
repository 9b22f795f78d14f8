"""What each way of writing TensorBoard scalars costs a run at start-up.

  .venv/bin/python benchmarks/metrics_writer_import.py --out=results/speed/metrics_writer_import.jsonl

For each writer, a fresh interpreter imports it and writes one scalar to a
new event file; the wall time of that interpreter is timed, less the time of
an interpreter that does nothing (`--rounds` of each, interleaved; medians):

  tensorboardX  tensorboardX.SummaryWriter (what trainer/metrics_log.py uses)
  tb_protos     TensorBoard's own event protos and record writer (internal
                modules of the tensorboard package)
  tf_summary    tf.summary.create_file_writer (imports TensorFlow)

One JSON record per writer, with the provenance of benchmarks/provenance.py.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import provenance

WRITERS = {
    'nothing': '',
    'tensorboardX': (
        'from tensorboardX import SummaryWriter\n'
        'w = SummaryWriter(D); w.add_scalar("a", 1.0, 1); w.close()\n'),
    'tb_protos': (
        'import os, time\n'
        'from tensorboard.compat.proto import event_pb2\n'
        'from tensorboard.plugins.scalar import summary_v2\n'
        'from tensorboard.summary.writer import record_writer\n'
        'r = record_writer.RecordWriter(open(os.path.join(D, "events.out.tfevents.0.x"), "ab"))\n'
        'r.write(event_pb2.Event(wall_time=time.time(), step=1,'
        ' summary=summary_v2.scalar_pb("a", 1.0)).SerializeToString()); r.close()\n'),
    'tf_summary': (
        'import tensorflow as tf\n'
        'w = tf.summary.create_file_writer(D)\n'
        'with w.as_default(): tf.summary.scalar("a", 1.0, step=1)\n'
        'w.close()\n'),
}


def _seconds(code: str) -> float:
  with tempfile.TemporaryDirectory() as directory:
    began = time.perf_counter()
    subprocess.run([sys.executable, '-c', f'D = {directory!r}\n{code}'], check=True,
                   env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'},
                   capture_output=True)
    return time.perf_counter() - began


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=5)
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  times = {name: [] for name in WRITERS}
  for _ in range(args.rounds):
    for name, code in WRITERS.items():
      times[name].append(_seconds(code))
  base = statistics.median(times['nothing'])
  for name in WRITERS:
    if name != 'nothing':
      results.write({'writer': name, 'rounds': args.rounds,
                     'start_up_s': round(statistics.median(times[name]) - base, 3),
                     'interpreter_s': round(base, 3)})


if __name__ == '__main__':
  main()
