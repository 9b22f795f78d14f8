"""Which GPUs each process of a job drives, decided once from the environment.

JAX's own SLURM and Open MPI detection restricts every process to the one
GPU whose ordinal is its local rank (jax/_src/clusters/cluster.py). That is
right for one process per GPU when every process sees all of its host's
GPUs, and wrong for the two other shapes a job takes:
  - one process per host: local rank 0 on every host, so each host would
    drive GPU 0 and leave the others idle;
  - one process per GPU that the scheduler has already bound to its own GPU
    (CUDA_VISIBLE_DEVICES holds one entry): that GPU is ordinal 0 in the
    process's view, and the local rank names a GPU it cannot see.
So the runtime never leaves the choice to JAX: it passes the ordinals chosen
here (`local_device_ids`, counted in the process's own CUDA view, after
CUDA_VISIBLE_DEVICES), and an empty list where every GPU in view is this
process's. Everything here is a pure function of the environment, so every
job shape is tested with a faked one (tests/test_device_visibility.py).
"""

import dataclasses
import os
import re

from core.errors import UsageError

# Where the NVIDIA driver lists one folder per GPU of the machine (Linux).
NVIDIA_GPU_DIR = '/proc/driver/nvidia/gpus'


@dataclasses.dataclass(frozen=True)
class JobShape:
  """This process's place among the job's processes on its host."""
  launcher: str  # slurm, ompi, launch.py (all on this host), by hand, single process
  local_rank: int  # index among the job's processes on this host
  local_processes: int  # the job's processes on this host
  processes: int  # the job's processes on all hosts


@dataclasses.dataclass(frozen=True)
class DeviceView:
  """The GPUs this process asks JAX for, and how many the job allotted it."""
  shape: JobShape
  visible: int | None  # GPUs in this process's CUDA view; None: not known
  local_device_ids: tuple[int, ...]  # ordinals to drive; (): every GPU in view
  allotted: int | None  # GPUs the job allotted this process; None: not said
  allotted_from: str  # the variable(s) that say so
  reason: str  # why these ordinals, in words


def cuda_visible_count(environ) -> int | None:
  """GPUs that CUDA_VISIBLE_DEVICES leaves in view; None when it is unset.

  CUDA reads the list up to its first invalid entry; SLURM writes
  'NoDevFiles' when a step has no GPU, and '' or -1 hide every GPU."""
  value = environ.get('CUDA_VISIBLE_DEVICES')
  if value is None:
    return None
  count = 0
  for entry in value.split(','):
    entry = entry.strip()
    if not (entry.isdigit() or entry.startswith(('GPU-', 'MIG-'))):
      break
    count += 1
  return count


def machine_gpu_count(gpu_dir: str = NVIDIA_GPU_DIR) -> int | None:
  """The machine's NVIDIA GPUs from the driver's listing; None without one."""
  try:
    return len(os.listdir(gpu_dir))
  except OSError:
    return None


def tasks_on_node(tasks_per_node: str, node_index: int) -> int | None:
  """SLURM's compressed per-node task counts ('2(x3),1') at one node."""
  counts = []
  for part in tasks_per_node.split(','):
    match = re.fullmatch(r'\s*(\d+)(?:\(x(\d+)\))?\s*', part)
    if not match:
      return None
    counts += [int(match.group(1))] * int(match.group(2) or 1)
  return counts[node_index] if 0 <= node_index < len(counts) else None


def _int(environ, name: str) -> int | None:
  value = environ.get(name, '').strip()
  return int(value) if value.isdigit() else None


def job_shape(environ, *, cluster: str | None, num_processes: int, process_id: int,
              coordinator_loopback: bool) -> JobShape:
  """Where this process sits on its host, from the launcher that started it.

  cluster: the detected cluster (slurm, ompi) or None. Processes given by
  flags (--num_processes) share one host when their coordinator is on
  loopback (launch.py), else each has a host of its own."""
  if cluster == 'slurm':
    node = _int(environ, 'SLURM_NODEID') or 0
    local = None
    for name in ('SLURM_STEP_TASKS_PER_NODE', 'SLURM_TASKS_PER_NODE'):
      if environ.get(name):
        local = tasks_on_node(environ[name], node)
        break
    local = local or _int(environ, 'SLURM_NTASKS_PER_NODE') or 1
    return JobShape('slurm', _int(environ, 'SLURM_LOCALID') or 0, local,
                    _int(environ, 'SLURM_NTASKS') or 1)
  if cluster == 'ompi':
    return JobShape('ompi', _int(environ, 'OMPI_COMM_WORLD_LOCAL_RANK') or 0,
                    _int(environ, 'OMPI_COMM_WORLD_LOCAL_SIZE') or 1,
                    _int(environ, 'OMPI_COMM_WORLD_SIZE') or 1)
  if num_processes > 1 and coordinator_loopback:
    return JobShape('launch.py', process_id, num_processes, num_processes)
  if num_processes > 1:
    return JobShape('by hand', 0, 1, num_processes)
  return JobShape('single process', 0, 1, 1)


def allotted_gpus(environ, local_processes: int) -> tuple[int | None, str]:
  """GPUs the job gave this process, as the scheduler (or the user) says.

  A per-task count wins; a count for the whole node is shared evenly by the
  node's processes."""
  per_task = environ.get('SLURM_GPUS_PER_TASK', '').strip()
  if per_task:
    # --gpus-per-task=[type:]count
    count = per_task.rsplit(':', 1)[-1]
    if count.isdigit():
      return int(count), f'SLURM_GPUS_PER_TASK={per_task}'
  node_counts = (('SLURM_GPUS_ON_NODE', _int(environ, 'SLURM_GPUS_ON_NODE')),
                 ('SLURM_STEP_GPUS', _listed(environ, 'SLURM_STEP_GPUS')))
  for name, count in node_counts:
    if count is not None:
      share = f' over {local_processes} processes on this host' if local_processes > 1 else ''
      return count // local_processes, f'{name}={environ[name]}{share}'
  # CUDA_VISIBLE_DEVICES alone is either the host's list, shared by its
  # processes, or this process's own (a binding): taken as shared when it
  # holds at least one GPU per process on the host, as own when it holds
  # fewer. (A binding of several GPUs per process outside SLURM, which
  # says so in SLURM_GPUS_*, reads as shared.)
  count = cuda_visible_count(environ)
  if count is None:
    return None, ''
  source = f'CUDA_VISIBLE_DEVICES={environ["CUDA_VISIBLE_DEVICES"]}'
  if local_processes > 1 and count >= local_processes:
    if count % local_processes:
      return None, ''  # choose() refuses the uneven split
    return count // local_processes, f'{source} over {local_processes} processes on this host'
  return count, source


def _listed(environ, name: str) -> int | None:
  value = environ.get(name, '').strip()
  return len(value.split(',')) if value else None


def choose(shape: JobShape, visible: int | None, allotted: int | None,
           allotted_from: str = '') -> DeviceView:
  """The ordinals this process drives, out of the `visible` GPUs in its view.

  - one process on the host: every GPU in view;
  - the scheduler bound the process to its own GPUs (no more in view than
    it was allotted): every GPU in view;
  - the host's processes share one view: an equal slice each, by local rank;
  - a view that does not split evenly: refused, since two processes on one
    GPU fail on the cluster, late and obscurely.
  """
  view = lambda ids, reason: DeviceView(shape, visible, ids, allotted, allotted_from, reason)
  n, rank = shape.local_processes, shape.local_rank
  if not visible:
    return view((), 'no GPU in view: JAX takes the devices it finds')
  if n == 1:
    return view(tuple(range(visible)), 'one process on this host: every GPU in view')
  if allotted is not None and visible <= allotted:
    return view(tuple(range(visible)), 'the scheduler bound this process to its own GPUs')
  if visible % n:
    raise UsageError(
        f'{visible} GPUs in view cannot be shared evenly by the {n} processes of '
        f'this job on this host ({shape.launcher}); start a process count that '
        f'divides {visible}, or bind each process to its own GPUs (SLURM: '
        f'--gpus-per-task)')
  each = visible // n
  return view(tuple(range(rank * each, (rank + 1) * each)),
              f'{n} processes share this host\'s {visible} GPUs: {each} each, by local rank')


def decide(environ, *, cluster: str | None, num_processes: int, process_id: int,
           coordinator_loopback: bool, gpu_dir: str = NVIDIA_GPU_DIR) -> DeviceView:
  """This process's DeviceView from its environment (the one place it is decided)."""
  shape = job_shape(environ, cluster=cluster, num_processes=num_processes,
                    process_id=process_id, coordinator_loopback=coordinator_loopback)
  visible = cuda_visible_count(environ)
  if visible is None:
    visible = machine_gpu_count(gpu_dir)
  allotted, allotted_from = allotted_gpus(environ, shape.local_processes)
  return choose(shape, visible, allotted, allotted_from)


def accelerators_expected(environ) -> bool:
  """False when the user asked JAX for the CPU alone (JAX_PLATFORMS=cpu):
  then no GPU count is held against the process."""
  platforms = environ.get('JAX_PLATFORMS', '').strip().lower()
  return not platforms or any(p in platforms for p in ('cuda', 'gpu', 'rocm', 'tpu'))


def shortfall(view: DeviceView, *, platform: str, local_devices: int,
              environ) -> str | None:
  """The one-line complaint when this process sees fewer accelerators than
  its job allotted it, else None. `platform` and `local_devices` are what
  JAX's backend reports once started."""
  if not view.allotted or not accelerators_expected(environ):
    return None
  seen = 0 if platform == 'cpu' else local_devices
  if seen >= view.allotted:
    return None
  hint = (' (JAX runs on the CPU: install the GPU build, make test ACCEL=cuda12 or '
          'cuda13, or set JAX_PLATFORMS=cpu to run on the CPU on purpose)'
          if platform == 'cpu' else '')
  return (f'this process was allotted {view.allotted} GPU(s) ({view.allotted_from}) '
          f'but JAX sees {seen}{hint}')


def describe(view: DeviceView, *, host: str, process_index: int, process_count: int,
             platform: str, local_devices: list, job_devices: int) -> str:
  """The start-up line: this process, its host, its devices, the job's total."""
  ids = ','.join(str(d.id) for d in local_devices)
  asked = (','.join(map(str, view.local_device_ids)) if view.local_device_ids
           else 'all in view')
  return (f'process {process_index} of {process_count} on {host} '
          f'({view.shape.launcher}, local rank {view.shape.local_rank} of '
          f'{view.shape.local_processes}): {len(local_devices)} {platform} device(s) '
          f'[{ids}] of {job_devices} in the job; GPU ordinals asked for: {asked} '
          f'({view.reason})')
