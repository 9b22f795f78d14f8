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


def global_bytes(tree) -> int:
  """The bytes of `tree`'s arrays whole, on no device in particular."""
  return sum(int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
             for leaf in jax.tree.leaves(tree))


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
  """Bytes one device can hold: the config's figure, else the device's own
  (None on a CPU, which reports none; the fit check uses step_limit)."""
  if configured_gib > 0:
    return int(configured_gib * GIB)
  stats = jax.local_devices()[0].memory_stats() or {}
  return stats.get('bytes_limit')


# A cgroup v1 limit at or above this is its way of saying "no limit"
# (the kernel writes the largest page-aligned signed 64-bit value).
_CGROUP_V1_UNLIMITED = 2**62


def _meminfo_bytes(meminfo: str, field: str) -> int | None:
  for line in meminfo.splitlines():
    name, _, rest = line.partition(':')
    if name.strip() == field:
      number, *unit = rest.split()
      return int(number) * (1024 if unit == ['kB'] else 1)
  return None


def host_memory_limit(meminfo: str, cgroup_v2: str | None = None,
                      cgroup_v1: str | None = None) -> int | None:
  """Bytes of host memory this process can use, from the files' texts: the
  smaller of what the kernel says is available (/proc/meminfo's
  MemAvailable, else MemTotal) and the cgroup's limit when it sets one
  (v2 memory.max, 'max' when none; v1 memory.limit_in_bytes). None when
  none of them says."""
  limits = []
  available = _meminfo_bytes(meminfo, 'MemAvailable')
  if available is None:
    available = _meminfo_bytes(meminfo, 'MemTotal')
  if available is not None:
    limits.append(available)
  if cgroup_v2 is not None and cgroup_v2.strip() not in ('', 'max'):
    limits.append(int(cgroup_v2))
  if cgroup_v1 is not None and cgroup_v1.strip():
    v1 = int(cgroup_v1)
    if v1 < _CGROUP_V1_UNLIMITED:
      limits.append(v1)
  return min(limits) if limits else None


def _read(path: str) -> str | None:
  try:
    with open(path, encoding='ascii') as f:
      return f.read()
  except OSError:
    return None


def read_host_memory_limit() -> int | None:
  """host_memory_limit of this machine's files (None where there are none)."""
  meminfo = _read('/proc/meminfo')
  if meminfo is None:
    return None
  return host_memory_limit(meminfo, _read('/sys/fs/cgroup/memory.max'),
                           _read('/sys/fs/cgroup/memory/memory.limit_in_bytes'))


@dataclasses.dataclass(frozen=True)
class Limit:
  """What a compiled step may use per device, and where the figure is from."""
  per_device: int
  devices: int  # devices sharing `total` (the process's CPU devices), else 1
  source: str  # says what the limit is, for the refusal's line
  host: bool = False  # the host's memory (a CPU run), not a device's

  @property
  def total(self) -> int:
    return self.per_device * self.devices


def device_limit(capacity: int) -> Limit:
  """A device's own memory, `capacity` bytes."""
  return Limit(capacity, 1, f'the device has {capacity / GIB:.2f} GiB')


def cpu_limit(host_bytes: int, num_devices: int) -> Limit:
  """The host's memory shared by a process's emulated CPU devices: each
  device's step holds its own buffers in the one host memory."""
  return Limit(per_device=host_bytes // num_devices, devices=num_devices,
               source=f'this process can use {host_bytes / GIB:.2f} GiB of host '
                      f'memory, shared by its {num_devices} CPU devices, '
                      f'{host_bytes // num_devices / GIB:.2f} GiB each',
               host=True)


def step_limit(configured_gib: float) -> Limit | None:
  """The fit check's limit: runtime.device_memory_gib when set (per device,
  any platform), else the device's memory on GPUs and TPUs, else on a CPU
  the host memory the process can use shared by its devices."""
  if configured_gib > 0:
    return Limit(int(configured_gib * GIB), 1,
                 f'runtime.device_memory_gib={configured_gib:g} allows '
                 f'{int(configured_gib * GIB) / GIB:.2f} GiB per device')
  devices = jax.local_devices()
  if devices[0].platform == 'cpu':
    host = read_host_memory_limit()
    return cpu_limit(host, len(devices)) if host else None
  capacity = device_capacity(0)
  return device_limit(capacity) if capacity else None


# What to change when the SPMD train step does not fit.
SPMD_REMEDY = ('Shard the state over more devices (mesh.fsdp, or mesh.shard_update '
               'for the optimiser state), recompute activations (model.remat=full), '
               'or lower the per-device batch (batch_size, or grad_accum_steps)')

# Added to the remedy on a CPU, where the image size is the usual culprit
# (a typo'd data.image_size) and the figure is the host's, not a device's.
CPU_REMEDY = ('; check data.image_size; emulate fewer devices '
              '(runtime.num_cpu_devices) to hold fewer copies of the state; '
              'runtime.device_memory_gib sets the limit per device')


def check_fits(memory: MemoryReport, capacity: Limit | None, *,
               what: str = 'the train step', remedy: str = SPMD_REMEDY) -> None:
  """UsageError saying by how much and what to change when it does not fit
  (capacity: step_limit's; None checks nothing)."""
  if capacity is None:
    return
  if memory.peak <= capacity.per_device:
    return
  shared = capacity.devices > 1
  needs = (f'about {memory.peak / GIB:.2f} GiB per device '
           + (f'({memory.peak * capacity.devices / GIB:.2f} GiB for '
              f'{capacity.devices} devices) ' if shared else ''))
  short = (memory.peak - capacity.per_device) * capacity.devices
  raise UsageError(
      f'{what} does not fit: it needs {needs}but {capacity.source}: '
      f'{short / GIB:.2f} GiB short (parameters + optimiser '
      f'state {(memory.params + memory.opt_state) / GIB:.2f} GiB, temporaries '
      f'{memory.temporaries / GIB:.2f} GiB per device). '
      f'{remedy}{CPU_REMEDY if capacity.host else ""}')


# Host batches alive at once beside data.prefetch_batches: the one the input
# pipeline is assembling and the one the step has been given.
HOST_BATCHES_BESIDE_PREFETCH = 2
# Decoded images reach the step as float32 RGB.
DECODED_BYTES_PER_PIXEL = 3 * 4


def host_batches_bytes(batch_size: int, image_size: int, num_processes: int,
                       prefetch_batches: int) -> int:
  """Bytes of decoded images one process holds at once: its share of the
  global batch (batch_size / num_processes, rounded up) of image_size^2 x 3
  float32 pixels, times the batches alive together (data.prefetch_batches
  prefetched, one being assembled, one in the step's hands). Augmentation's
  and the decoder's working copies come on top, so it is a floor."""
  per_process = -(-batch_size // num_processes)
  batch = per_process * image_size**2 * DECODED_BYTES_PER_PIXEL
  return batch * (prefetch_batches + HOST_BATCHES_BESIDE_PREFETCH)


def check_host_batches(config, num_processes: int, host_bytes: int | None) -> None:
  """UsageError when the decoded images of the host batches alone exceed the
  host memory this process can use (host_bytes; None: not known, no check)."""
  if host_bytes is None:
    return
  batch = max(config.batch_size, config.eval.batch_size)
  key = 'batch_size' if batch == config.batch_size else 'eval.batch_size'
  held = config.data.prefetch_batches + HOST_BATCHES_BESIDE_PREFETCH
  need = host_batches_bytes(batch, config.data.image_size, num_processes,
                            config.data.prefetch_batches)
  if need <= host_bytes:
    return
  share = f' ({num_processes} processes share it)' if num_processes > 1 else ''
  raise UsageError(
      f'the host batches do not fit: {key}={batch}{share} of '
      f'data.image_size={config.data.image_size} px images, decoded (float32 RGB), '
      f'{held} batches held at once (data.prefetch_batches='
      f'{config.data.prefetch_batches} + {HOST_BATCHES_BESIDE_PREFETCH}) need {need / GIB:.2f} GiB but this '
      f"process's host memory has {host_bytes / GIB:.2f} GiB available; lower "
      f'data.image_size, {key} or data.prefetch_batches')
