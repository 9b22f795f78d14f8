"""Writes a tfds data set of ImageNet-like JPEGs for the input benchmark.

The images cost what ImageNet's cost to decode: 500x375 px (ImageNet's most
common size), JPEG quality 90 with 4:2:0 chroma, and content made of smooth
colour fields plus pixel noise, tuned so that files average over 85 KB
(ImageNet's training JPEGs average about 110 KB). Noise is what makes a JPEG
large and slow to decode; smooth fields alone would compress to a few KB.

    python benchmarks/make_imagenet_like.py --data_dir=runs/imagenet_like

prints one JSON line (file sizes, counts, with its provenance:
benchmarks/provenance.py; --out also appends it to a file) and writes the
stats to <data_dir>/imagenet_like_stats.json, then `benchmarks/input_pipeline.py`
reads the data set as `data.source='tfds'`, `data.name='imagenet_like'`.
"""

import argparse
import io
import json
import multiprocessing
import os
import sys
import time

import numpy as np
from PIL import Image

NAME = 'imagenet_like'
VERSION = '1.0.0'
WIDTH, HEIGHT = 500, 375
QUALITY = 90
NUM_CLASSES = 1000
# Pixel noise (standard deviation, per channel) drawn per image: at quality
# 90 this range gives files of about 75-105 KB, 90 KB on average.
NOISE_RANGE = (14.0, 22.0)


def render(rng: np.random.Generator, width: int = WIDTH,
           height: int = HEIGHT) -> np.ndarray:
  """uint8 [height, width, 3]: smooth colour fields plus pixel noise."""
  cells_y, cells_x = rng.integers(2, 6, size=2)
  grid = rng.uniform(0, 255, (cells_y, cells_x, 3)).astype(np.uint8)
  fields = np.asarray(Image.fromarray(grid).resize(
      (width, height), Image.Resampling.BICUBIC), np.float32)
  noise = rng.normal(0, rng.uniform(*NOISE_RANGE), fields.shape)
  return np.clip(fields + noise, 0, 255).astype(np.uint8)


def encode(split_and_index: tuple[int, int], seed: int = 0,
           size: tuple[int, int] = (WIDTH, HEIGHT)) -> bytes:
  """The JPEG of example `index` of a split: a pure function of its identity."""
  rng = np.random.default_rng([seed, *split_and_index])
  buffer = io.BytesIO()
  Image.fromarray(render(rng, *size)).save(buffer, 'JPEG', quality=QUALITY)
  return buffer.getvalue()


def _encode_job(job: tuple[int, int, int, int]) -> bytes:
  split_id, index, width, height = job
  return encode((split_id, index), size=(width, height))


def _examples(pool, split_id: int, count: int, sizes: list[int],
              width: int = WIDTH, height: int = HEIGHT):
  jobs = [(split_id, i, width, height) for i in range(count)]
  for i, jpeg in enumerate(pool.imap(_encode_job, jobs, chunksize=16)):
    sizes.append(len(jpeg))
    yield i, {'image': jpeg, 'label': i % NUM_CLASSES}


def main(argv=None) -> dict:
  # Here, not at the top: input_pipeline.py imports this module for NAME.
  import provenance  # pylint: disable=g-import-not-at-top  # benchmarks/provenance.py
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--data_dir', required=True,
                      help='tfds data dir to write imagenet_like/ into')
  parser.add_argument('--num_train', type=int, default=2048)
  parser.add_argument('--num_eval', type=int, default=2048)
  parser.add_argument('--file_format', default='array_record',
                      choices=('array_record', 'tfrecord'))
  parser.add_argument('--workers', type=int, default=os.cpu_count())
  parser.add_argument('--width', type=int, default=WIDTH,
                      help='image width (ImageNet\'s most common: 500)')
  parser.add_argument('--height', type=int, default=HEIGHT,
                      help='image height (ImageNet\'s most common: 375)')
  provenance.add_out_argument(parser)
  args = parser.parse_args(argv)
  results = provenance.Results(args.out)

  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  features = tfds.features.FeaturesDict({
      'image': tfds.features.Image(encoding_format='jpeg'),
      'label': tfds.features.ClassLabel(num_classes=NUM_CLASSES),
  })
  sizes = []
  start = time.perf_counter()
  with multiprocessing.Pool(args.workers) as pool:
    tfds.dataset_builders.store_as_tfds_dataset(
        name=NAME, version=VERSION, features=features,
        split_datasets={
            'train': _examples(pool, 0, args.num_train, sizes, args.width,
                               args.height),
            'validation': _examples(pool, 1, args.num_eval, sizes, args.width,
                                    args.height)},
        data_dir=args.data_dir, file_format=args.file_format,
        disable_shuffling=True)
  stats = {
      'data_dir': os.path.abspath(args.data_dir), 'name': NAME,
      'file_format': args.file_format, 'num_train': args.num_train,
      'num_eval': args.num_eval, 'width': args.width, 'height': args.height,
      'quality': QUALITY, 'mean_file_kb': round(np.mean(sizes) / 1000, 1),
      'min_file_kb': round(min(sizes) / 1000, 1),
      'max_file_kb': round(max(sizes) / 1000, 1),
      'seconds': round(time.perf_counter() - start, 1),
  }
  with open(os.path.join(args.data_dir, f'{NAME}_stats.json'), 'w') as f:
    json.dump(stats, f)
  results.write(stats)
  return stats


if __name__ == '__main__':
  main(sys.argv[1:])
