"""What a compiled step needs in device memory, and whether it fits."""

import dataclasses

import jax
import numpy as np

from core.errors import UsageError

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class MemoryReport:
  """Bytes per device (the device holding the largest shards)."""
  params: int
  opt_state: int
  batch_stats: int
  arguments: int  # everything the step takes: state + batch
  outputs: int
  aliased: int  # outputs written into donated arguments (not counted twice)
  temporaries: int  # activations, gradients, collectives' buffers

  @property
  def peak(self) -> int:
    return self.arguments + self.outputs - self.aliased + self.temporaries

  def describe(self) -> str:
    gib = lambda n: f'{n / GIB:.3f} GiB'
    return (f'per device: parameters {gib(self.params)}, optimiser state '
            f'{gib(self.opt_state)}, temporaries {gib(self.temporaries)}, '
            f'peak about {gib(self.peak)}')


def _bytes_per_device(tree) -> int:
  """Largest per-device footprint of `tree`'s shards (ShapeDtypeStructs)."""
  per_device: dict = {}
  for leaf in jax.tree.leaves(tree):
    shard = leaf.sharding.shard_shape(leaf.shape)
    size = int(np.prod(shard)) * np.dtype(leaf.dtype).itemsize
    for device in leaf.sharding.device_set:
      per_device[device] = per_device.get(device, 0) + size
  return max(per_device.values(), default=0)


def report(compiled, abstract_state) -> MemoryReport:
  """A compiled step's memory, with the state's bytes from its shardings."""
  return program_report(
      compiled, params=_bytes_per_device(abstract_state.params),
      opt_state=_bytes_per_device(abstract_state.opt_state),
      batch_stats=_bytes_per_device(abstract_state.batch_stats))


def program_report(compiled, *, params: int, opt_state: int,
                   batch_stats: int) -> MemoryReport:
  """A compiled program's memory on one device, with the bytes of state it
  holds there as the caller counts them (the parameter-server workers keep
  a whole copy of the variables and no optimiser state)."""
  analysis = compiled.memory_analysis()
  get = lambda name: int(getattr(analysis, name, 0) or 0) if analysis else 0
  return MemoryReport(
      params=params, opt_state=opt_state, batch_stats=batch_stats,
      arguments=get('argument_size_in_bytes'),
      outputs=get('output_size_in_bytes'),
      aliased=get('alias_size_in_bytes'),
      temporaries=get('temp_size_in_bytes'))


def device_capacity(configured_gib: float) -> int | None:
  """Bytes one device can hold: the config's figure, else the device's own."""
  if configured_gib > 0:
    return int(configured_gib * GIB)
  stats = jax.local_devices()[0].memory_stats() or {}
  return stats.get('bytes_limit')


# What to change when the SPMD train step does not fit.
SPMD_REMEDY = ('Shard the state over more devices (mesh.fsdp, or mesh.shard_update '
               'for the optimiser state), recompute activations (model.remat=full), '
               'or lower the per-device batch (batch_size, or grad_accum_steps)')


def check_fits(memory: MemoryReport, capacity: int | None, *,
               what: str = 'the train step', remedy: str = SPMD_REMEDY) -> None:
  """UsageError saying by how much and what to change when it does not fit."""
  if capacity is None or memory.peak <= capacity:
    return
  raise UsageError(
      f'{what} does not fit: it needs about {memory.peak / GIB:.2f} GiB '
      f'per device but the device has {capacity / GIB:.2f} GiB '
      f'({(memory.peak - capacity) / GIB:.2f} GiB short; parameters + optimiser '
      f'state {(memory.params + memory.opt_state) / GIB:.2f} GiB, temporaries '
      f'{memory.temporaries / GIB:.2f} GiB). {remedy}')
