"""The shape of what a train step takes: one batch of images and labels.

Every program compiled ahead of its data (the SPMD step, the emulated
workers' programs, the FLOP count, the planner's timings) is lowered
against this spec, so a change of the input's layout is made here once.
"""

import jax
import numpy as np

IMAGE_DTYPE = np.uint8  # images travel as bytes; step_functions.py normalises
LABEL_DTYPE = np.int32


def batch_spec(batch_size: int, image_size: int, sharding=None) -> dict:
  """{'image': [B, S, S, 3] uint8, 'label': [B] int32} as ShapeDtypeStructs."""
  return {
      'image': jax.ShapeDtypeStruct((batch_size, image_size, image_size, 3),
                                    IMAGE_DTYPE, sharding=sharding),
      'label': jax.ShapeDtypeStruct((batch_size,), LABEL_DTYPE, sharding=sharding),
  }


def random_batch(batch_size: int, image_size: int, rng: np.random.Generator,
                 num_classes: int = 2) -> dict:
  """Host arrays of batch_spec's shapes: uniform pixels, labels below num_classes
  (something to time a program on; the values do not matter)."""
  spec = batch_spec(batch_size, image_size)
  return {'image': rng.integers(0, 256, spec['image'].shape, spec['image'].dtype),
          'label': rng.integers(0, num_classes, spec['label'].shape, spec['label'].dtype)}
