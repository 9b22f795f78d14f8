"""The named model's SPMD train step as XLA compiles it for the whole job:
which collectives it runs and how many bytes each moves.

A step pays a cost for each array its collectives combine (a library such
as gloo moves each array on its own), and each one's bytes at the network's
bandwidth: the gradients' all-reduce, and also the batch-norm statistics'
small all-reduces of the forward and backward passes (one per layer, in
sequence), or FSDP's all-gathers. Counting them is reading the compiled
program, not timing it: the planner multiplies the arrays by the probe's
per-array cost and the bytes by its fitted bandwidth (planner/from_probe.py).
"""

import re

import jax

from trainer import experiment
from trainer import specs
from trainer.engines import spmd

# The ops that move bytes between devices, as they appear in XLA's HLO text
# (the asynchronous forms' -start; their -done moves nothing more).
_COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
                'collective-permute')
_OP = re.compile(r'=\s*(?P<shape>\(.*?\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+'
                 r'(?P<op>' + '|'.join(_COLLECTIVES) + r')(?:-start)?\(')
_ARRAY = re.compile(r'([a-z]+[0-9]*)\[([0-9,]*)\]')
_BYTES_PER_ELEMENT = {'pred': 1, 's8': 1, 'u8': 1, 'f16': 2, 'bf16': 2, 's16': 2,
                      'u16': 2, 'f32': 4, 's32': 4, 'u32': 4, 'f64': 8, 's64': 8,
                      'u64': 8}


def _shape_arrays(shape: str, op: str) -> list[int]:
  """Bytes of each array of an op's result shape; of a -start's tuple
  (operands, results), the results' half."""
  arrays = _ARRAY.findall(shape)
  sizes = []
  for dtype, dims in arrays:
    count = 1
    for d in filter(None, dims.split(',')):
      count *= int(d)
    sizes.append(count * _BYTES_PER_ELEMENT.get(dtype, 4))
  if shape.startswith('(') and op in ('all-gather', 'collective-permute') and len(sizes) % 2 == 0:
    sizes = sizes[len(sizes) // 2:]  # (operand, result) pairs of an async start
  return sizes


def collectives_in(hlo_text: str) -> list[dict]:
  """[{'op', 'operands', 'bytes'}] of each collective in a compiled
  program's HLO text, in program order (pure: tests feed it text). XLA
  combines many arrays into one collective of a tuple; `operands` counts
  them, since a collectives library may move each on its own (gloo does, at
  one latency each)."""
  found = []
  for line in hlo_text.splitlines():
    match = _OP.search(line)
    if match:
      arrays = _shape_arrays(match['shape'], match['op'])
      found.append({'op': match['op'], 'operands': len(arrays), 'bytes': sum(arrays)})
  return found


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
  ops = collectives_in(compiled.as_text())
  by_op = {}
  for o in ops:
    entry = by_op.setdefault(o['op'], {'count': 0, 'operands': 0, 'bytes': 0})
    entry['count'] += 1
    entry['operands'] += o['operands']
    entry['bytes'] += o['bytes']
  return {'per_device_batch': per_device_batch, 'mesh': dict(config.mesh),
          'count': len(ops), 'operands': sum(o['operands'] for o in ops),
          'bytes': sum(o['bytes'] for o in ops), 'by_op': by_op}
