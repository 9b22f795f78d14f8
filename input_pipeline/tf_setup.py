"""Imports TensorFlow for input and event files only: quiet, off accelerators.

TensorFlow is only a decoder, a thread pool and TensorBoard's event writer
(trainer/metrics_log.py) here. If it saw a GPU it would reserve that GPU's
memory, which belongs to JAX, so it is hidden before the runtime starts. Importing this module changes nothing else in the process:
`keep_freed_heap_memory()`, a process-wide malloc setting, is called by the
data sets that decode files, when they are created.
"""

import ctypes
import os


def keep_freed_heap_memory() -> None:
  """Stops glibc from handing freed heap memory back to the kernel.

  Every step turns a few hundred 100 KB records into TF strings and frees
  them again. With glibc's default trim threshold the freed memory goes back
  to the kernel and page-faults in again on the next step, and the decoding
  threads queue on the process's memory-map lock: 7-9% of the ImageNet
  input pipeline's throughput (benchmarks/input_pipeline.py). The process
  keeps its high-water mark of heap instead, which a trainer does anyway.
  """
  try:
    libc = ctypes.CDLL('libc.so.6')
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return  # not glibc (macOS, musl): nothing to tune
  m_trim_threshold = -1
  mallopt(m_trim_threshold, 1 << 30)


os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# oneDNN speeds up matmuls and convolutions, which we never run, and its
# start-up notice ignores TF_CPP_MIN_LOG_LEVEL; off keeps TF quiet.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '0')
# A pooling allocator for TF's host tensors. The default hands every decoded
# image and every batch back to malloc, which returns the large ones to the
# kernel and page-faults them in again on the next use: about 7% of the
# ImageNet input pipeline's CPU time (benchmarks/input_pipeline.py). Only
# read when TF starts, so it has no effect if TF was imported first.
os.environ.setdefault('TF_CPU_ALLOCATOR_USE_BFC', 'true')
# TensorFlow imports Keras 3 whole at start-up (to register its optimizers),
# about 1.5 s of every run's start on a 2-core CPU; nothing here uses Keras.
# With this setting TF looks for the legacy tf_keras package instead, which
# is not installed, and skips the import.
os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')

import tensorflow as tf  # pylint: disable=g-import-not-at-top

try:
  tf.config.set_visible_devices([], 'GPU')
except RuntimeError:
  # The runtime already started (someone imported TF first); nothing to undo.
  pass
