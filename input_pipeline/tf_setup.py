"""Imports TensorFlow for input work only: quiet, and kept off accelerators.

TensorFlow is only a decoder and a thread pool here. If it saw a GPU it would
reserve that GPU's memory, which belongs to JAX, so it is hidden before the
runtime starts.
"""

import os

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

import tensorflow as tf  # pylint: disable=g-import-not-at-top

try:
  tf.config.set_visible_devices([], 'GPU')
except RuntimeError:
  # The runtime already started (someone imported TF first); nothing to undo.
  pass
