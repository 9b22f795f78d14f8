"""Images per second of the input pipeline alone: no model, no devices.

Reads the data set that `make_imagenet_like.py` wrote through the same code
the trainer uses (`input_pipeline.create_dataset`, data.source='tfds'): raw
records by index, parse, fused JPEG decode-and-crop, resize, uint8 batches
on the host. TensorFlow uses every core.

    python benchmarks/make_imagenet_like.py --data_dir=runs/imagenet_like
    python benchmarks/input_pipeline.py --data_dir=runs/imagenet_like \
        --transforms=train,eval,float32_baseline --out=results/input_pipeline/input_pipeline.jsonl

(make_imagenet_like.py writes array_record, the format this project prepares
tfds data sets in; --file_format=tfrecord writes tfds's default format, the
one most existing ImageNet copies are in.)

prints one JSON line per transform (train: the training augment of
--augments, each in turn: inception_crop, the random resized crop + flip
decoded with the JPEG; crop_flip, the centre crop then a padded random crop
+ flip; eval: centre crop; float32_baseline: the usual full-decode float32
pipeline, for comparison; decode_only: the train transform's fused JPEG
decode of the crop alone, one image per call, no resize, flip or batch of
pixels: the floor of any transform that decodes at full scale), each with the best and the median of --repeats
timed runs, because other work on the machine slows some runs.
cpu_ms_per_image is this process's CPU time per image (all of tf.data's
threads): less sensitive to such neighbours than img/s.

--randaugment_num_ops, --randaugment_magnitude, --randaugment_magnitude_std,
--random_erasing_prob and --repeated_augmentation set those data.* keys
for the train transform (DeiT's host augmentation: 2, 9, 0.5, 0.25, 3);
each record names their values. Mixup and CutMix run on the devices,
inside the train step: they cost the host nothing, and nothing here
measures them.

--jpeg_scaled_decode sets data.jpeg_scaled_decode; each train and eval
record then also says how far its pixels are from the exact decode's on the
same images and the same random crops (--compare_images of them): the mean
absolute difference in 0-255 units and the PSNR in dB.

Each line carries its provenance (benchmarks/provenance.py); --out also
appends the lines to a file.
"""

import argparse
import itertools
import json
import math
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
import numpy as np


# The data.* keys of the host's extra training augmentation, each a flag.
HOST_AUGMENTATION = {'randaugment_num_ops': int, 'randaugment_magnitude': float,
                     'randaugment_magnitude_std': float,
                     'random_erasing_prob': float, 'repeated_augmentation': int}


def _data_config(args, augment='inception_crop', exact=False):
  data = default.get_config().data
  data.update(dict(source='tfds', name=make_imagenet_like.NAME,
                   dir=args.data_dir, image_size=args.image_size,
                   augment=augment, eval_split='validation',
                   prefetch_batches=2,
                   jpeg_scaled_decode=args.jpeg_scaled_decode and not exact))
  data.update({key: getattr(args, key) for key in HOST_AUGMENTATION})
  return data


def _images(batches, count: int) -> np.ndarray:
  """The first `count` images of a stream of host batches."""
  images = []
  while sum(len(i) for i in images) < count:
    images.append(next(batches)['image'])
  return np.concatenate(images)[:count]


def pixel_difference(images: np.ndarray, exact: np.ndarray) -> dict:
  """Mean absolute difference (0-255 units) and PSNR (dB) against `exact`."""
  diff = images.astype(np.float64) - exact.astype(np.float64)
  mse = float(np.mean(diff ** 2))
  return {'vs_exact_mean_abs_diff': round(float(np.mean(np.abs(diff))), 3),
          'vs_exact_psnr_db': round(10 * math.log10(255 ** 2 / mse), 2)
                              if mse else None,
          'vs_exact_images': len(images)}


def _compare(args, augment: str, transform: str) -> dict:
  """How far this configuration's pixels are from the exact decode's."""
  if not args.jpeg_scaled_decode:
    return {}
  views = []
  for exact in (False, True):
    dataset = input_pipeline.create_dataset(
        _data_config(args, augment, exact), batch_size=args.batch_size,
        eval_batch_size=args.batch_size, seed=0)
    batches = (dataset.train_batches() if transform == 'train' else
               dataset.eval_batches())
    views.append(_images(batches, args.compare_images))
  return pixel_difference(*views)


def decode_only_batches(source, batch_size: int, seed: int = 0):
  """Endless batches of the decoded crops' shapes: the train transform's
  window and fused decode, nothing else (pixels are dropped, so crops of
  any size batch)."""
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import crops, order
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  records = source.records('train')
  stream = order.TrainOrder(len(records), seed)

  def generate():
    for step in itertools.count():
      positions = order.train_positions(step, batch_size, 0, 1)
      indices = stream.example_indices(positions)
      yield {'record': np.array(records.__getitems__(indices.tolist()), dtype=object),
             'position': positions}

  def load(example):
    encoded, label = source.parse(example['record'])
    shape = tf.io.extract_jpeg_shape(encoded)
    window = crops.inception_window(
        shape[0], shape[1], tf.stack([tf.constant(seed, tf.int64), example['position']]),
        snap_to_blocks=True)
    return {'image': tf.shape(tf.io.decode_and_crop_jpeg(encoded, window, channels=3)),
            'label': label}

  steps = tf.data.Dataset.from_generator(generate, output_signature={
      'record': tf.TensorSpec([batch_size], tf.string),
      'position': tf.TensorSpec([batch_size], tf.int64)})
  ds = steps.unbatch().map(load, num_parallel_calls=tf.data.AUTOTUNE)
  return ds.batch(batch_size).prefetch(2).as_numpy_iterator()


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
                      help='comma-separated: train, eval, float32_baseline, decode_only')
  parser.add_argument('--augments', default='inception_crop',
                      help='comma-separated data.augment values of the train '
                      'transform: inception_crop, crop_flip, flip, none')
  parser.add_argument('--jpeg_scaled_decode', action='store_true',
                      help='data.jpeg_scaled_decode=True')
  defaults = default.get_config().data
  for key, kind in HOST_AUGMENTATION.items():
    parser.add_argument(f'--{key}', type=kind, default=defaults[key],
                        help=f'data.{key} of the train transform')
  parser.add_argument('--compare_images', type=int, default=1024,
                      help='images compared with the exact decode')
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--images', type=int, default=6144,
                      help='images per timed run (eval: one pass)')
  parser.add_argument('--warmup_images', type=int, default=1024)
  parser.add_argument('--repeats', type=int, default=3)
  provenance.add_out_argument(parser)
  args = parser.parse_args(argv)
  records = provenance.Results(args.out)

  stats_path = os.path.join(args.data_dir,
                            f'{make_imagenet_like.NAME}_stats.json')
  stats = {}
  if os.path.exists(stats_path):
    with open(stats_path) as f:
      stats = json.load(f)

  results = []
  for transform, augment in _cases(args):
    dataset = input_pipeline.create_dataset(
        _data_config(args, augment), batch_size=args.batch_size,
        eval_batch_size=args.batch_size, seed=0)
    if transform == 'eval':
      _time_eval_pass(dataset)  # warm-up
      runs = [_time_eval_pass(dataset) for _ in range(args.repeats)]
    elif transform == 'train':
      batches = dataset.train_batches()
    elif transform == 'decode_only':
      # pylint: disable-next=g-import-not-at-top
      from input_pipeline import tfds_source
      batches = decode_only_batches(tfds_source.open_source(_data_config(args)),
                                    args.batch_size)
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
      del batches
    rates = [r for r, _ in runs]
    result = {
        'transform': transform,
        'augment': augment if transform == 'train' else None,
        'jpeg_scaled_decode': args.jpeg_scaled_decode,
        **({key: getattr(args, key) for key in HOST_AUGMENTATION}
           if transform == 'train' else {}),
        'image_size': args.image_size,
        'batch_size': args.batch_size, 'cores': os.cpu_count(),
        'images_per_sec_best': round(max(rates)),
        'images_per_sec_median': round(statistics.median(rates)),
        'images_per_sec_runs': [round(r) for r in rates],
        'cpu_ms_per_image_median': round(
            statistics.median(c for _, c in runs), 3),
        'cpu_ms_per_image_runs': [round(c, 3) for _, c in runs],
        'mean_file_kb': stats.get('mean_file_kb'),
        'file_format': stats.get('file_format'),
        'skipped': dataset.skipped_counts().get(transform, 0),
    }
    if transform in ('train', 'eval'):
      result.update(_compare(args, augment, transform))
    results.append(records.write(result))
  return results


def _cases(args) -> list[tuple[str, str]]:
  """(transform, augment) in order; one train case per augment."""
  cases = []
  for transform in args.transforms.split(','):
    if transform == 'train':
      cases += [('train', a) for a in args.augments.split(',')]
    else:
      cases.append((transform, 'inception_crop'))
  return cases


if __name__ == '__main__':
  main(sys.argv[1:])
