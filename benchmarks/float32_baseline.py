"""The usual float32 tf.data ImageNet pipeline, as a yardstick for ours.

Full JPEG decode, Inception crop by slicing the decoded image, bilinear
resize to float32, flip, normalisation on the host, float32 batches: what
input pipelines did before fused decode-and-crop and device-side
normalisation. Same records, same order and batch size as
`input_pipeline.create_dataset`, so the difference is the transform.
"""

import itertools

import numpy as np

from input_pipeline import crops
from input_pipeline import order
from input_pipeline import tf_setup
from input_pipeline.tf_setup import tf

_MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
_STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def train_batches(source, split: str, batch_size: int, image_size: int,
                  seed: int = 0):
  """Endless float32 [batch, size, size, 3] batches of the training split."""
  tf_setup.keep_freed_heap_memory()  # as our data sets do: a like-for-like yardstick
  records = source.records(split)
  stream = order.TrainOrder(len(records), seed)

  def generate():
    for step in itertools.count():
      positions = order.train_positions(step, batch_size, 0, 1)
      indices = stream.example_indices(positions)
      yield {'record': np.array(records.__getitems__(indices.tolist()),
                                dtype=object), 'position': positions}

  def load(example):
    encoded, label = source.parse(example['record'])
    image = tf.io.decode_jpeg(encoded, channels=3)
    example_seed = tf.stack([tf.constant(seed, tf.int64), example['position']])
    begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=example_seed, min_object_covered=0.0,
        aspect_ratio_range=crops.ASPECT_RATIO_RANGE,
        area_range=crops.AREA_RANGE, max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    image = tf.image.resize(tf.slice(image, begin, extent),
                            [image_size, image_size])
    image = tf.image.stateless_random_flip_left_right(image, example_seed)
    return (image - _MEAN) / _STD, label

  steps = tf.data.Dataset.from_generator(generate, output_signature={
      'record': tf.TensorSpec([batch_size], tf.string),
      'position': tf.TensorSpec([batch_size], tf.int64)})
  ds = steps.unbatch().map(load, num_parallel_calls=tf.data.AUTOTUNE)
  return ds.batch(batch_size).prefetch(2).as_numpy_iterator()
