"""Starts the JAX runtime: emulated CPU devices and multi-process set-up."""

import ipaddress
import math
import os
import socket
import sys

from absl import logging

from cli import device_visibility
from cli import gpu_settings
from configs.values import CLUSTERS, at_least, one_of
from core.errors import UsageError

# What each cluster's launcher sets in every process (the variables JAX's
# own detection reads): the cluster kind, its process count.
_CLUSTER_ENV = {
    'slurm': (('SLURM_JOB_ID', 'SLURM_STEP_NODELIST', 'SLURM_PROCID', 'SLURM_LOCALID'),
              'SLURM_NTASKS'),
    'ompi': (('OMPI_MCA_orte_hnp_uri', 'OMPI_COMM_WORLD_RANK'), 'OMPI_COMM_WORLD_SIZE'),
}


# glibc's malloc gives every large XLA buffer a fresh mapping whose 4 KiB
# pages all fault on first write: on CPU that doubled the time of the
# gradient all-reduce (docs/performance.md). These take large buffers from the heap
# on huge pages and keep freed memory for reuse.
MALLOC_TUNABLES = ('glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967296:'
                   'glibc.malloc.trim_threshold=4294967296')


def check_config(config) -> None:
  """runtime.*: devices, the cluster, time-outs, the agreement's cadence;
  UsageError with one line."""
  at_least('runtime.num_cpu_devices', config.runtime.num_cpu_devices, 0)
  at_least('runtime.device_memory_gib', config.runtime.device_memory_gib, 0.0)
  one_of('runtime.cluster', config.runtime.cluster, CLUSTERS)
  at_least('runtime.init_timeout_s', config.runtime.init_timeout_s, 1)
  at_least('runtime.heartbeat_timeout_s', config.runtime.heartbeat_timeout_s, 1)
  held_s = config.runtime.stop_held_limit_s
  if not math.isfinite(held_s):
    raise UsageError(f'runtime.stop_held_limit_s={held_s!r} must be a finite number of seconds')
  at_least('runtime.stop_held_limit_s', held_s, 1.0)
  at_least('runtime.agree_every_steps', config.runtime.agree_every_steps, 1)


def command_line_mode(argv) -> str | None:
  """The --mode a command line asks for (--mode=M or --mode M; the last
  wins, as absl's does), or None."""
  mode = None
  for i, arg in enumerate(argv):
    if arg.startswith('--mode='):
      mode = arg.split('=', 1)[1]
    elif arg == '--mode' and i + 1 < len(argv):
      mode = argv[i + 1]
  return mode


def restart_with_malloc_tunables(glibc_defaults: bool = False) -> None:
  """Re-executes this process (same pid and command line) with
  MALLOC_TUNABLES, since glibc reads GLIBC_TUNABLES only at process start;
  a no-op off Linux or when GLIBC_TUNABLES is already set (set it, even
  empty, to keep others). glibc_defaults (a mode's choice, cli/modes.py):
  no restart, the variable set empty to record glibc's defaults."""
  if sys.platform.startswith('linux') and 'GLIBC_TUNABLES' not in os.environ:
    os.environ['GLIBC_TUNABLES'] = '' if glibc_defaults else MALLOC_TUNABLES
    if os.environ['GLIBC_TUNABLES']:
      os.execv(sys.executable, sys.orig_argv)


def detect_cluster(cluster: str, environ=os.environ) -> str | None:
  """The cluster whose multi-process job this process belongs to, or None.

  cluster: auto (whichever is present), slurm, ompi, or none. A job of one
  task is one process: no coordination service to start.
  """
  if cluster == 'none':
    return None
  kinds = list(_CLUSTER_ENV) if cluster == 'auto' else [cluster]
  for kind in kinds:
    names, count = _CLUSTER_ENV[kind]
    if all(n in environ for n in names) and count in environ:
      return kind if int(environ[count]) > 1 else None
  if cluster != 'auto':
    names, count = _CLUSTER_ENV[cluster]
    raise UsageError(f'runtime.cluster={cluster}: this process is not in a {cluster} '
                     f'job (it needs {", ".join(names + (count,))}); start it with '
                     f'{"srun" if cluster == "slurm" else "mpirun"}, or use auto')
  return None


def loopback_bind_address(coordinator_address: str | None) -> str | None:
  """Where the coordination service should listen, when every process is on
  this machine (a loopback coordinator address, as launch.py gives): that
  address only. JAX otherwise binds its unauthenticated service to every
  interface; None leaves a cluster's coordinator to JAX (runtime.* and
  JAX_COORDINATOR_BIND_ADDRESS, docs/multi-host.md)."""
  if not coordinator_address or ':' not in coordinator_address:
    return None
  host = coordinator_address.rsplit(':', 1)[0].strip('[]')
  if host == 'localhost':
    return coordinator_address
  try:
    return coordinator_address if ipaddress.ip_address(host).is_loopback else None
  except ValueError:
    return None  # a host name


def job_processes(num_processes: int, cluster: str = 'auto', environ=os.environ) -> int:
  """The job's processes on all hosts, known before JAX starts:
  --num_processes, else the scheduler's count (1 outside a job of several)."""
  if num_processes > 1:
    return num_processes
  detected = detect_cluster(cluster, environ)
  return device_visibility.job_shape(environ, cluster=detected, num_processes=1, process_id=0,
                                     coordinator_loopback=False).processes


def initialize(*, num_cpu_devices: int, coordinator_address: str | None,
               num_processes: int, process_id: int, cluster: str = 'auto',
               init_timeout_s: int = 300, heartbeat_timeout_s: int = 30,
               compilation_cache_dir: str = '', cpu_xnnpack: bool = True,
               gpu_defaults: bool = True, environ=os.environ) -> device_visibility.DeviceView:
  """Must run before anything touches a JAX backend. Returns the GPUs this
  process asked for (cli/device_visibility.py), for check_devices."""
  detected = None if num_processes > 1 else detect_cluster(cluster, environ)
  bind_address = loopback_bind_address(coordinator_address) if num_processes > 1 else None
  view = device_visibility.decide(environ, cluster=detected, num_processes=num_processes,
                                  process_id=process_id,
                                  coordinator_loopback=bind_address is not None)
  if gpu_defaults:
    apply_gpu_settings(view, environ)
  # XLA reads XLA_FLAGS when the first backend starts, so this still counts.
  if cpu_xnnpack and '--xla_cpu_use_xnnpack' not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               ' --xla_cpu_use_xnnpack=true').strip()
  # On a CPU-only machine one XLA device uses the cores poorly for small
  # convolutions; one emulated device per core keeps every core busy. An
  # explicit XLA_FLAGS device count (as the tests set) wins.
  import jax  # pylint: disable=g-import-not-at-top
  if '--xla_force_host_platform_device_count' not in os.environ.get('XLA_FLAGS', ''):
    jax.config.update('jax_num_cpu_devices', num_cpu_devices or os.cpu_count() or 1)
  if compilation_cache_dir:
    # Compiled programs are kept on disk, keyed by the program, the devices
    # and the versions: a rerun (a resume after preemption, an eval) loads
    # them instead of compiling again.
    jax.config.update('jax_compilation_cache_dir',
                      os.path.abspath(os.path.expanduser(compilation_cache_dir)))
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)
  timeouts = dict(initialization_timeout=init_timeout_s,
                  heartbeat_timeout_seconds=heartbeat_timeout_s)
  if num_processes > 1:
    where = f'--coordinator_address={coordinator_address}'
    args = dict(coordinator_address=coordinator_address, num_processes=num_processes,
                process_id=process_id)
    if bind_address:
      args['coordinator_bind_address'] = bind_address
  elif detected is not None:
    where = f'runtime.cluster={cluster} (found a {detected} job)'
    args = dict(cluster_detection_method=detected)
  else:
    return view  # one process: JAX takes every GPU in view
  # Always given, so that JAX's cluster detection never substitutes its
  # one-GPU-per-local-rank default; an empty list restricts nothing.
  args['local_device_ids'] = list(view.local_device_ids)
  # JAX's preemption service would take SIGTERM over (a C++ handler that
  # only records a notice, which nothing here reads): the signal must stay
  # with coordination/preemption.py, which stops every process at one step.
  jax.config.update('jax_enable_preemption_service', False)
  try:
    jax.distributed.initialize(**args, **timeouts)
  except (RuntimeError, ValueError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise UsageError(f'{where}: could not join the run within '
                     f'runtime.init_timeout_s={init_timeout_s}: {first}') from None
  return view


def apply_gpu_settings(view: device_visibility.DeviceView, environ=os.environ) -> dict:
  """Sets cli/gpu_settings.py's settings when this process will run on GPUs
  (a CUDA plugin and a GPU in view, and no JAX_PLATFORMS that excludes
  them); XLA reads them when the backend starts. Returns what it set."""
  if not (view.visible and device_visibility.accelerators_expected(environ)
          and gpu_settings.cuda_plugin_installed()):
    return {}
  changes = gpu_settings.gpu_environment(
      environ, single_host=view.shape.local_processes == view.shape.processes)
  environ.update(changes)
  if changes:
    logging.info('GPU settings (docs/gpus.md; runtime.gpu_defaults=false leaves them '
                 'out): %s', ' '.join(f'{k}={v!r}' for k, v in changes.items()))
  return changes


def check_devices(view: device_visibility.DeviceView, environ=os.environ) -> str:
  """Stops this process (exit 2) when, its backend started, it sees fewer
  accelerators than its job allotted it: before any work, instead of
  training on a fraction of the GPUs. Returns the start-up line that says
  what it drives (main.py logs it once the config has passed its checks
  against the devices, so that a bad config's error stays the only line)."""
  import jax  # pylint: disable=g-import-not-at-top
  devices = jax.local_devices()
  platform = devices[0].platform
  problem = device_visibility.shortfall(view, platform=platform,
                                        local_devices=len(devices), environ=environ)
  if problem:
    raise UsageError(problem)
  return device_visibility.describe(
      view, host=socket.gethostname(), process_index=jax.process_index(),
      process_count=jax.process_count(), platform=platform, local_devices=devices,
      job_devices=jax.device_count())
