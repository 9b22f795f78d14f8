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


# XLA's mesh form, in which jax 0.10's compiled SPMD programs print most
# collectives:
#   replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}
# the mesh's axes and sizes; its devices (an arange reshaped and transposed,
# or listed; in order when absent); the axes each group spans, a sub-axis
# 'a':(p)k being the factor of k of axis a after its leading factor of p.
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\((.*?)\))? \{([^}]*)\}")
_MESH_AXIS = re.compile(r"'([^']+)'=([0-9]+)")
_GROUP_AXIS = re.compile(r"'([^']+)'(?::\(([0-9]+)\)([0-9]+))?")
_IOTA_IDS = re.compile(r'\[([0-9,]+)\](?:T\(([0-9,]+)\))?')


def _numbers(text: str) -> list[int]:
  return [int(x) for x in re.findall(r'[0-9]+', text)]


def _iota(dims: list[int], perm: str | None) -> np.ndarray:
  """arange(prod(dims)) reshaped to dims, transposed by perm ("1,0") if given."""
  ids = np.arange(math.prod(dims)).reshape(dims)
  return ids.transpose(_numbers(perm)) if perm else ids


def _mesh_device_ids(text: str | None, dims: list[int]) -> np.ndarray:
  """The mesh's device ids laid out in its axes."""
  count = math.prod(dims)
  if not text:
    ids = np.arange(count)
  elif iota := _IOTA_IDS.fullmatch(text):
    ids = _iota(_numbers(iota[1]), iota[2])
  else:
    ids = np.array(_numbers(text))
  if ids.size != count:
    raise ValueError(f'device_ids=({text}) does not fill a mesh of {dims}')
  return ids.reshape(dims)


def _mesh_groups(match: re.Match) -> list[list[int]]:
  """The device groups of a collective in the mesh form: the devices that
  differ only along the group's axes (or sub-axes)."""
  axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(match[1])]
  ids = _mesh_device_ids(match[2], [size for _, size in axes])
  spanned = [(name, int(pre) if pre else None, int(size) if size else None)
             for name, pre, size in _GROUP_AXIS.findall(match[3])]
  # Each axis split at its sub-axes' bounds, major factor first (a row-major
  # reshape), so that each spanned (sub-)axis is a run of factors.
  factors, grouped = [], []
  for name, size in axes:
    bounds = {1, size} | {b for n, pre, k in spanned if n == name and pre
                          for b in (pre, pre * k)}
    bounds = sorted(bounds)
    first = len(factors)
    factors += [hi // lo for lo, hi in zip(bounds, bounds[1:])]
    for n, pre, k in spanned:
      if n == name:
        grouped += [first + i for i, lo in enumerate(bounds[:-1])
                    if pre is None or pre <= lo < pre * k]
  rest = [i for i in range(len(factors)) if i not in grouped]
  size = math.prod(factors[i] for i in grouped)
  return ids.reshape(factors).transpose(rest + grouped).reshape(-1, size).tolist()


def replica_groups(line: str) -> list[list[int]] | None:
  """The device groups of one collective's HLO line: the explicit form
  ({{0,2},{1,3}}), the iota form ([G,S]<=[dims]T(perm): arange(prod(dims))
  reshaped to dims, transposed by perm, read as G groups of S), or a
  permute's source-target pairs; None when the line names none (one group of
  every device). Also XLA's mesh form (_MESH_GROUPS)."""
  mesh = _MESH_GROUPS.search(line)
  if mesh:
    return _mesh_groups(mesh)
  iota = _IOTA_GROUPS.search(line)
  if iota:
    return _iota(_numbers(iota[2]), iota[3]).reshape(-1, _numbers(iota[1])[-1]).tolist()
  explicit = _EXPLICIT_GROUPS.search(line)
  if explicit:
    return _int_lists(explicit[1] or '') or None
  pairs = _PAIRS.search(line)
  if pairs:
    return _int_lists(pairs[1])
  return None


_COMPUTATION = re.compile(r'^(?:ENTRY )?%([\w.\-]+) .*\{\s*$')
_CALLED = re.compile(r'(body|condition|to_apply|calls|branch_computations|called_computations)'
                     r'=\{?((?:%[\w.\-]+(?:, )?)+)\}?')
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"([0-9]+)"\}')


def runs_per_step(hlo_text: str) -> dict[str, int]:
  """How many times each computation of a compiled program runs in one call
  of it (pure): the entry once; a while loop's body as often as the loop's
  known trip count (XLA annotates the loops it counted, e.g. the scan of
  gradient accumulation) times its caller's; any other called computation as
  often as its caller. A loop of unknown count is counted once."""
  calls = {}  # caller -> [(callee, times)]
  entry, current = None, None
  for line in hlo_text.splitlines():
    head = _COMPUTATION.match(line)
    if head and not line.startswith(' '):
      current = head[1]
      entry = current if line.startswith('ENTRY') else entry
      continue
    for kind, names in _CALLED.findall(line):
      trips = _TRIP_COUNT.search(line)
      times = int(trips[1]) if kind == 'body' and trips else 1
      for name in re.findall(r'%([\w.\-]+)', names):
        calls.setdefault(current, []).append((name, times))
  runs = {}
  pending = [(entry, 1)] if entry else []
  while pending:
    name, times = pending.pop()
    runs[name] = runs.get(name, 0) + times
    pending += [(callee, times * n) for callee, n in calls.get(name, [])]
  return runs


def collectives_in(hlo_text: str) -> list[dict]:
  """[{'op', 'operands', 'bytes', 'array_bytes', 'groups', 'runs'}] of each
  collective in a compiled program's HLO text, in program order (pure:
  tests feed it text). XLA combines many arrays into one collective of a
  tuple; `operands` counts them, since a collectives library may move each
  on its own (gloo does, at a cost each that can depend on its size,
  `array_bytes`). `bytes` are the result's on one device; `groups` the
  devices that take part together (replica_groups), None for all; `runs`
  how many times it runs in one call of the program (runs_per_step: a
  collective inside gradient accumulation's loop runs once a micro-batch)."""
  runs = runs_per_step(hlo_text)
  found = []
  current = None
  for line in hlo_text.splitlines():
    head = _COMPUTATION.match(line)
    if head and not line.startswith(' '):
      current = head[1]
      continue
    match = _OP.search(line)
    if match:
      arrays = _shape_arrays(match['shape'], match['op'])
      found.append({'op': match['op'], 'operands': len(arrays), 'bytes': sum(arrays),
                    'array_bytes': arrays, 'groups': replica_groups(line), 'runs': runs.get(current, 1)})
  return found
