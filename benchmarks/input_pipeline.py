"""Images per second of the input pipeline alone: no model, no devices.

Reads the data set that `make_imagenet_like.py` wrote through the same code
the trainer uses (`input_pipeline.create_dataset`, data.source='tfds'): raw
records by index, parse, fused JPEG decode-and-crop, resize, uint8 batches
on the host. TensorFlow uses every core.

    python benchmarks/make_imagenet_like.py --data_dir=runs/imagenet_like
    python benchmarks/input_pipeline.py --data_dir=runs/imagenet_like \
        --transforms=train,eval,float32_baseline --out=benchmarks/input_pipeline.jsonl

(make_imagenet_like.py writes array_record, the format this project prepares
tfds data sets in; --file_format=tfrecord writes tfds's default format, the
one most existing ImageNet copies are in.)

prints one JSON line per transform (train: random resized crop + flip; eval:
centre crop; float32_baseline: the usual full-decode float32 pipeline, for
comparison), each with the best and the median of --repeats timed runs,
because other work on the machine slows some runs. cpu_ms_per_image is this
process's CPU time per image: less sensitive to such neighbours than img/s.
Each line carries its provenance (benchmarks/provenance.py); --out also
appends the lines to a file.
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import float32_baseline
from benchmarks import make_imagenet_like
from benchmarks import provenance
from configs import default
import input_pipeline


def _data_config(args):
  data = default.get_config().data
  data.update(dict(source='tfds', name=make_imagenet_like.NAME,
                   dir=args.data_dir, image_size=args.image_size,
                   augment='inception_crop', eval_split='validation',
                   prefetch_batches=2))
  return data


def _time(batches, num_images: int, batch_size: int) -> tuple[float, float]:
  """(images per second, CPU ms per image) over the next num_images."""
  wall, cpu = time.perf_counter(), time.process_time()
  for _ in range(num_images // batch_size):
    next(batches)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  seen = num_images // batch_size * batch_size
  return seen / wall, 1000 * cpu / seen


def _time_eval_pass(dataset) -> tuple[float, float]:
  """(images per second, CPU ms per image) of one evaluation pass.

  Timed from its first batch: building the pass's tf.data pipeline takes
  a fixed half second or so, which on 50,000 ImageNet images is noise but
  on this benchmark's small split would not be.
  """
  batches = dataset.eval_batches()
  first = next(batches)
  wall, cpu = time.perf_counter(), time.process_time()
  seen = sum(len(b['mask']) for b in batches)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  del first
  return seen / wall, 1000 * cpu / seen


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--data_dir', required=True)
  parser.add_argument('--transforms', default='train,eval',
                      help='comma-separated: train, eval, float32_baseline')
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--images', type=int, default=6144,
                      help='images per timed run (eval: one pass)')
  parser.add_argument('--warmup_images', type=int, default=1024)
  parser.add_argument('--repeats', type=int, default=3)
  provenance.add_out_argument(parser)
  args = parser.parse_args(argv)
  records = provenance.Results(args.out)

  dataset = input_pipeline.create_dataset(
      _data_config(args), batch_size=args.batch_size,
      eval_batch_size=args.batch_size, seed=0)
  stats_path = os.path.join(args.data_dir,
                            f'{make_imagenet_like.NAME}_stats.json')
  stats = {}
  if os.path.exists(stats_path):
    with open(stats_path) as f:
      stats = json.load(f)

  results = []
  for transform in args.transforms.split(','):
    if transform == 'eval':
      _time_eval_pass(dataset)  # warm-up
      runs = [_time_eval_pass(dataset) for _ in range(args.repeats)]
    elif transform == 'train':
      batches = dataset.train_batches()
    else:
      # pylint: disable-next=g-import-not-at-top
      from input_pipeline import tfds_source
      batches = float32_baseline.train_batches(
          tfds_source.open_source(_data_config(args)), 'train',
          args.batch_size, args.image_size)
    if transform != 'eval':
      for _ in itertools.islice(batches,
                                args.warmup_images // args.batch_size):
        pass  # tf.data start-up and autotuning are not throughput
      runs = [_time(batches, args.images, args.batch_size)
              for _ in range(args.repeats)]
    rates = [r for r, _ in runs]
    result = {
        'transform': transform, 'image_size': args.image_size,
        'batch_size': args.batch_size, 'cores': os.cpu_count(),
        'images_per_sec_best': round(max(rates)),
        'images_per_sec_median': round(statistics.median(rates)),
        'images_per_sec_runs': [round(r) for r in rates],
        'cpu_ms_per_image_median': round(
            statistics.median(c for _, c in runs), 3),
        'mean_file_kb': stats.get('mean_file_kb'),
        'file_format': stats.get('file_format'),
        'skipped': dataset.skipped_counts().get(transform, 0),
    }
    results.append(records.write(result))
  return results


if __name__ == '__main__':
  main(sys.argv[1:])
