"""The tf.data graph that decodes a stream's examples, in chunks, tagged.

tf.data decodes the examples in chunks of up to `CHUNK` per function call: a
call and a thread hand-off per example cost about 6% of the ImageNet input
pipeline's throughput (benchmarks/input_pipeline.py). Every example carries
the step and slot it belongs to (`TAGS`), so that the host can regroup them
by step when a chunk whose decoding raised was dropped (`recovery.py`).
"""

from collections.abc import Callable
import itertools
import math

from input_pipeline.stream import Stream
from input_pipeline.tf_setup import tf

AUTOTUNE = tf.data.AUTOTUNE
# Examples per call of the decode function: enough to make the per-call cost
# small against eight JPEG decodes, few enough that all cores get chunks.
CHUNK = 8
# Tags that travel with each example to the host and never further.
TAGS = ('step', 'slot', 'mask')


def tagged(load: Callable) -> Callable:
  def load_tagged(example):
    tags = {key: example[key] for key in TAGS if key in example}
    return {**load(example), **tags}
  return load_tagged


def build(stream: Stream, load: Callable, *, local_batch: int,
          prefetch: int) -> tf.data.Dataset:
  """Decoded examples, tagged with their step and slot, one batch per step.

  Args:
    stream: the stream.
    load: one example's dict -> {'image', 'label'}; it may raise.
    local_batch: examples per step on this process.
    prefetch: batches prepared ahead.
  """
  chunk = math.gcd(local_batch, CHUNK)
  chunks_per_step = local_batch // chunk

  def generate():
    # Cheap Python once per step; all per-example work is in tf.data's
    # threads.
    indices = itertools.count() if stream.count is None else range(stream.count)
    for i in indices:
      yield stream.inputs(i)

  def tag_and_split(step, inputs):
    inputs = {**inputs, 'step': tf.fill([local_batch], step),
              'slot': tf.range(local_batch, dtype=tf.int32)}
    return tf.data.Dataset.from_tensor_slices({
        key: tf.reshape(value, [chunks_per_step, chunk, *value.shape[1:]])
        for key, value in inputs.items()})

  load_tagged = tagged(load)

  def load_chunk(inputs):
    examples = [load_tagged({key: value[j] for key, value in inputs.items()})
                for j in range(chunk)]
    return {key: tf.stack([e[key] for e in examples]) for key in examples[0]}

  def merge_chunks(batch):
    return {key: tf.reshape(value, [-1, *value.shape[2:]])
            for key, value in batch.items()}

  chunks = tf.data.Dataset.from_generator(
      generate, output_signature=stream.spec).enumerate().flat_map(
          tag_and_split)
  # A chunk whose decoding raised is dropped; the others keep their order.
  # (Errors reach TF's log only below TF_CPP_MIN_LOG_LEVEL=2.)
  decoded = chunks.map(load_chunk, num_parallel_calls=AUTOTUNE,
                       deterministic=True).ignore_errors(log_warning=True)
  batches = decoded.batch(chunks_per_step).map(merge_chunks)
  if prefetch > 0:
    batches = batches.prefetch(prefetch)
  options = tf.data.Options()
  options.deterministic = True
  # Without the autotuner, AUTOTUNE means one decode call in flight per core,
  # which is what it settles on here anyway. With it, tearing down a pipeline
  # (every evaluation pass) sometimes waits a second for its thread.
  options.autotune.enabled = False
  return batches.with_options(options)
