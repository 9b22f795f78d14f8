"""The named model's SPMD train step as XLA compiles it for the whole job:
which collectives it runs and how many bytes each moves.

A step pays a cost for each array its collectives combine (a library such
as gloo moves each array on its own), and each one's bytes at the network's
bandwidth: the gradients' all-reduce, and also the batch-norm statistics'
small all-reduces of the forward and backward passes (one per layer, in
sequence), or FSDP's all-gathers. Counting them is reading the compiled
program, not timing it: the planner charges each array the probe's cost for an
array of its size (arrays_by_bytes: [bytes, how many]) and the bytes at
its fitted bandwidth (planner/from_probe.py).
"""

import collections

import jax

from trainer import experiment
from trainer import hlo_collectives
from trainer import specs
from trainer.engines import spmd


def step_collectives(config, per_device_batch: int, num_classes: int) -> dict:
  """The collectives of the configured model's SPMD train step over every
  device of the job, at `per_device_batch`: compiled, never run."""
  config = config.copy_and_resolve_references()
  config.engine = 'spmd'
  config.batch_size = per_device_batch * jax.device_count()
  exp = experiment.build_without_data(config, num_classes)
  batch = specs.batch_spec(config.batch_size, config.data.image_size, exp.batch_sharding)
  with exp.tracing_context():
    compiled = spmd.jit_train_step(exp).lower(exp.abstract_state, batch).compile()
  ops = hlo_collectives.collectives_in(compiled.as_text())
  by_op = {}
  for o in ops:
    entry = by_op.setdefault(o['op'], {'count': 0, 'operands': 0, 'bytes': 0})
    entry['count'] += 1
    entry['operands'] += o['operands']
    entry['bytes'] += o['bytes']
  sizes = collections.Counter(b for o in ops for b in o['array_bytes'])
  return {'per_device_batch': per_device_batch, 'mesh': dict(config.mesh),
          'count': len(ops), 'operands': sum(o['operands'] for o in ops),
          'bytes': sum(o['bytes'] for o in ops), 'by_op': by_op,
          'arrays_by_bytes': sorted([size, n] for size, n in sizes.items())}
