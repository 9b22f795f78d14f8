"""What a compiled step's collectives cost on a cluster of hosts: pure
functions of the collective (its op, bytes and device groups) and the links.

A collective over a group of n devices runs as a ring (NCCL's default for
these sizes). Each device sends, over the whole collective,

  all-reduce      2(n-1)/n x B   in 2(n-1) steps   (B: the array, on one device)
  all-gather      (n-1)/n x B    in n-1 steps      (B: the gathered result)
  reduce-scatter  (n-1) x B      in n-1 steps      (B: the scattered result, 1/n of the input)
  all-to-all      (n-1)/n x B    in n-1 steps
  collective-permute  B          in 1 step

and each step pays the latency of the slowest link it crosses, and, where
the links' library moves a collective's arrays one by one (gloo), a cost
per array. A group
inside one host moves at the host's fabric (plan.intra_host_gbps, per device
and direction). A group over h hosts is a ring ordered host by host: one
link per host leaves it, carrying what one device sends; the groups that
have members on a host run at once and share its NIC (plan.link_bandwidth_gbps),
so a host's NIC carries that many rings' traffic. The time is the slower of
the fabric and the NIC, plus the steps' latency.

Where a probe timed the collective itself on a group of the same size and
level (probe/mesh_collectives.py: Links.measured), that replaces the ring:
latency_s + its bytes x seconds_per_byte + what its arrays beyond those of
the timed collective (hlo_operands) added to the timed tuples
(further_arrays_s).

The mesh's devices lie on the hosts in order, G to a host
(plan.devices_per_host): the tensor axis, innermost, stays inside a host
while it fits, then fsdp, then data.
"""

import dataclasses

_RING_STEPS = {'all-reduce': lambda n: 2 * (n - 1), 'all-gather': lambda n: n - 1,
               'reduce-scatter': lambda n: n - 1, 'all-to-all': lambda n: n - 1,
               'collective-permute': lambda n: 1}
_SENT = {'all-reduce': lambda n: 2 * (n - 1) / n, 'all-gather': lambda n: (n - 1) / n,
         'reduce-scatter': lambda n: n - 1, 'all-to-all': lambda n: (n - 1) / n,
         'collective-permute': lambda n: 1.0}


@dataclasses.dataclass(frozen=True)
class Links:
  """The cluster's links, in bytes/s and seconds (inf: unlimited)."""
  devices_per_host: int
  intra_bytes_per_s: float  # each device's port into its host's fabric
  intra_latency_s: float
  nic_bytes_per_s: float  # each host's NIC, per direction
  nic_latency_s: float
  # What each array of a collective adds per ring step (a library that
  # moves a tuple's arrays one by one pays it; from a probe's steps).
  intra_array_s: float = 0.0
  nic_array_s: float = 0.0
  # {'<op> <level> <n>': {latency_s, seconds_per_byte, extra_arrays_s,
  # per_operand_s, hlo_operands}}: collectives a probe timed in a program
  # (probe/mesh_collectives.py).
  measured: dict = dataclasses.field(default_factory=dict)


def sent_bytes(op: str, nbytes: float, n: int) -> float:
  """What each device of an n-device ring sends in the collective."""
  return 0.0 if n <= 1 else _SENT[op](n) * nbytes


def collective_s(op: str, nbytes: float, groups: list[list[int]], links: Links,
                 operands: int = 1) -> dict:
  """{'seconds', 'level': 'inside a host' | 'across hosts' | 'none', 'group_size'}
  of one collective of `operands` arrays whose groups are `groups` (device
  ids of the mesh)."""
  n = len(groups[0]) if groups else 1
  if n <= 1:
    return {'seconds': 0.0, 'level': 'none', 'group_size': n}
  g = links.devices_per_host
  hosts = len({d // g for d in groups[0]})
  level = 'inside a host' if hosts == 1 else 'across hosts'
  timed = links.measured.get(f'{op} {level} {n}')
  if timed:
    return {'seconds': timed['latency_s'] + nbytes * timed['seconds_per_byte']
                       + further_arrays_s(timed, operands - timed['hlo_operands']),
            'level': level, 'group_size': n}
  sent = sent_bytes(op, nbytes, n)
  steps = _RING_STEPS[op](n)
  fabric_s = sent / links.intra_bytes_per_s
  if hosts == 1:
    step_latency = links.intra_latency_s + operands * links.intra_array_s
    return {'seconds': steps * step_latency + fabric_s, 'level': 'inside a host',
            'group_size': n}
  # Rings with members on one host, each leaving it through the NIC once.
  rings_per_host = g // max(n // hosts, 1)
  nic_s = rings_per_host * sent / links.nic_bytes_per_s
  step_latency = links.nic_latency_s + operands * links.nic_array_s
  return {'seconds': steps * step_latency + max(fabric_s, nic_s),
          'level': 'across hosts', 'group_size': n}


def further_arrays_s(timed: dict, arrays: int) -> float:
  """What `arrays` arrays beyond the timed collective's add to it: the line
  through (0, 0) and the probe's tuples (extra_arrays_s: [[arrays,
  seconds]]), beyond the longest at its last segment's slope; a probe
  without tuples' points (older ones), per_operand_s each."""
  if arrays <= 0:
    return 0.0
  curve = [(0, 0.0)] + [tuple(p) for p in timed.get('extra_arrays_s') or []]
  if len(curve) == 1:
    return arrays * timed['per_operand_s']
  # The segment that holds `arrays`, or the last one, extended.
  (a0, s0), (a1, s1) = next(
      (pair for pair in zip(curve, curve[1:]) if arrays <= pair[1][0]), curve[-2:])
  return s0 + (s1 - s0) * (arrays - a0) / (a1 - a0)


def device_groups_all(num_devices: int) -> list[list[int]]:
  """The one group a collective without replica_groups runs over."""
  return [list(range(num_devices))]


def step_s(compute_s: float, communication_s: float, *, overlap: bool,
           backprop_share: float) -> float:
  """A step's time: compute, then the collectives; with overlap, the
  collectives hide behind the backward pass's share of the compute."""
  if not overlap:
    return compute_s + communication_s
  return compute_s + max(0.0, communication_s - backprop_share * compute_s)


def extrapolate(at_small: float, at_larger: float, small: int, larger: int,
                target: int) -> float:
  """A term affine in depth (or batch), from its values at two depths."""
  if larger == small:
    return at_small
  slope = (at_larger - at_small) / (larger - small)
  return at_small + slope * (target - small)
