"""The configurations of the trainer's SPMD mesh that a plan compares: pure.

A candidate is a (data, fsdp, tensor) mesh over every device, with the
optimiser's update sharded over the data axis or not (mesh.shard_update,
ZeRO-1; only where data > 1), and a rung of the memory ladder: remat and
gradient accumulation (LADDER), the fastest rung whose step fits.
"""

import dataclasses
import math

# Remat and accumulation, each remat from one micro-batch up: what a mesh
# may need to fit. Each costs time (recomputing the dots of the forward
# pass less than all of it; each further micro-batch repeats the
# activations' collectives and FSDP's reduction of the gradients), so the
# plan takes the fastest rung that fits (planner/mesh_search.py).
LADDER = tuple((remat, accum) for accum in (1, 2, 4, 8, 16, 32)
               for remat in ('none', 'dots', 'full'))


@dataclasses.dataclass(frozen=True)
class Candidate:
  data: int
  fsdp: int
  tensor: int
  shard_update: bool = False
  remat: str = 'none'
  grad_accum: int = 1

  def mesh_name(self) -> str:
    parts = [f'{a}={s}' for a, s in (('data', self.data), ('fsdp', self.fsdp),
                                     ('tensor', self.tensor)) if s > 1]
    name = ' x '.join(parts) or 'one device'
    return name + (' + ZeRO-1' if self.shard_update else '')

  def name(self) -> str:
    extra = [f'remat={self.remat}'] if self.remat != 'none' else []
    extra += [f'accum={self.grad_accum}'] if self.grad_accum > 1 else []
    return ', '.join([self.mesh_name()] + extra)

  def micro_batch(self, global_batch: int) -> float:
    """The images a device's step works on at once: its data shard's batch
    (data x fsdp shards) over the micro-batches."""
    return global_batch / (self.data * self.fsdp * self.grad_accum)

  def config_values(self) -> dict:
    return dict(zip(CONFIG_KEYS, (self.data, self.fsdp, self.tensor, self.shard_update,
                                  self.remat, self.grad_accum)))


# The config keys a candidate sets, as a plan row carries them.
CONFIG_KEYS = ('mesh.data', 'mesh.fsdp', 'mesh.tensor', 'mesh.shard_update', 'model.remat',
               'grad_accum_steps')


def meshes(num_devices: int, tensor_divides: int) -> list[tuple[int, int, int]]:
  """Every (data, fsdp, tensor) of product num_devices whose tensor size
  divides `tensor_divides` (the gcd of the sizes the tensor axis splits)."""
  found = []
  for tensor in range(1, num_devices + 1):
    if num_devices % tensor or tensor_divides % tensor:
      continue
    rest = num_devices // tensor
    for fsdp in range(1, rest + 1):
      if rest % fsdp == 0:
        found.append((rest // fsdp, fsdp, tensor))
  return sorted(found, key=lambda m: (m[2], m[1]))


def tensor_divides(sizes) -> int:
  """The gcd of the sizes a tensor axis splits (heads, MLP width, channels)."""
  return math.gcd(*sizes) if sizes else 1


def first_rungs(num_devices: int, global_batch: int, divides: int) -> list[Candidate]:
  """Each mesh (and each with ZeRO-1 where data > 1) whose batch-sharded
  devices (data x fsdp) divide the global batch, at the ladder's first rung."""
  found = []
  for data, fsdp, tensor in meshes(num_devices, divides):
    if global_batch % (data * fsdp):
      continue
    for shard_update in ((False, True) if data > 1 else (False,)):
      found.append(Candidate(data, fsdp, tensor, shard_update))
  return found


def rungs(candidate: Candidate, global_batch: int) -> list[Candidate]:
  """The candidate at every rung of LADDER its per-device batch allows."""
  per_device = global_batch // (candidate.data * candidate.fsdp)  # one micro-batch
  return [dataclasses.replace(candidate, remat=remat, grad_accum=accum)
          for remat, accum in LADDER if per_device % accum == 0]
