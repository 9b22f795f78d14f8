"""The collectives of a compiled XLA program, read from its HLO text: each
one's op, arrays, bytes on one device and device groups (pure: tests feed
it text). probe/step_program.py counts them for the probe, and
planner/mesh_plan.py costs them on a cluster's links."""

import math
import re

import numpy as np

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


_EXPLICIT_GROUPS = re.compile(r'replica_groups=\{(\{[0-9,]*\}(?:,\{[0-9,]*\})*)?\}')
_IOTA_GROUPS = re.compile(r'replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?')
_PAIRS = re.compile(r'source_target_pairs=\{(\{[0-9,]*\}(?:,\{[0-9,]*\})*)\}')


def _int_lists(text: str) -> list[list[int]]:
  return [[int(x) for x in g.split(',') if x] for g in re.findall(r'\{([0-9,]*)\}', text)]


def replica_groups(line: str) -> list[list[int]] | None:
  """The device groups of one collective's HLO line: the explicit form
  ({{0,2},{1,3}}), the iota form ([G,S]<=[dims]T(perm): arange(prod(dims))
  reshaped to dims, transposed by perm, read as G groups of S), or a
  permute's source-target pairs; None when the line names none (one group of
  every device)."""
  iota = _IOTA_GROUPS.search(line)
  if iota:
    numbers = lambda text: [int(x) for x in text.split(',')]
    dims = numbers(iota[2])
    ids = np.arange(math.prod(dims)).reshape(dims)
    if iota[3]:
      ids = ids.transpose(numbers(iota[3]))
    return ids.reshape(-1, numbers(iota[1])[-1]).tolist()
  explicit = _EXPLICIT_GROUPS.search(line)
  if explicit:
    return _int_lists(explicit[1] or '') or None
  pairs = _PAIRS.search(line)
  if pairs:
    return _int_lists(pairs[1])
  return None


def collectives_in(hlo_text: str) -> list[dict]:
  """[{'op', 'operands', 'bytes', 'groups'}] of each collective in a compiled
  program's HLO text, in program order (pure: tests feed it text). XLA
  combines many arrays into one collective of a tuple; `operands` counts
  them, since a collectives library may move each on its own (gloo does, at
  one latency each). `bytes` are the result's on one device; `groups` the
  devices that take part together (replica_groups), None for all."""
  found = []
  for line in hlo_text.splitlines():
    match = _OP.search(line)
    if match:
      arrays = _shape_arrays(match['shape'], match['op'])
      found.append({'op': match['op'], 'operands': len(arrays), 'bytes': sum(arrays),
                    'groups': replica_groups(line)})
  return found
