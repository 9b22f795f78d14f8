"""Where and when a probe ran: what probe.json's `provenance` holds.

The same facts as benchmarks/provenance.py records for benchmark results
(date, commit, command, hardware, the settings that change measurements),
read here from the running job itself: its devices as JAX sees them and
every process's host.
"""

import datetime
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Settings that change what is measured, recorded when set.
ENVIRONMENT = ('XLA_FLAGS', 'GLIBC_TUNABLES', 'JAX_PLATFORMS', 'CUDA_VISIBLE_DEVICES',
               'NCCL_SOCKET_IFNAME', 'NCCL_IB_HCA', 'NCCL_NET', 'NCCL_ALGO', 'NCCL_PROTO')


def commit(repo: str = REPO) -> str:
  """HEAD's hash, "-dirty" when tracked files differ from it; "unknown" outside git."""
  try:
    head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    changes = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                             cwd=repo, capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return 'unknown'
  return head + ('-dirty' if changes.strip() else '')


def _first_line_after(path: str, prefix: str) -> str | None:
  try:
    with open(path) as f:
      for line in f:
        if line.startswith(prefix):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return None


def cpu_model() -> str:
  return (_first_line_after('/proc/cpuinfo', 'model name') or platform.processor()
          or platform.machine())


def memory_gib() -> float | None:
  total = _first_line_after('/proc/meminfo', 'MemTotal')
  return round(int(total.split()[0]) / 2**20, 1) if total else None


def command(argv: list[str] | None = None) -> list[str]:
  """argv with the program's path relative to the repository when inside it."""
  argv = list(sys.argv if argv is None else argv)
  if argv and os.path.abspath(argv[0]).startswith(REPO + os.sep):
    argv[0] = os.path.relpath(os.path.abspath(argv[0]), REPO)
  return argv


def this_host() -> dict:
  """What one process reports about its machine."""
  import socket  # pylint: disable=g-import-not-at-top
  return {'host_name': socket.gethostname(), 'cpu_model': cpu_model(),
          'cpu_count': os.cpu_count(), 'memory_gib': memory_gib()}


def collect(devices, hosts_by_process: list[dict]) -> dict:
  """The provenance of a probe over `devices` (every device of the job);
  hosts_by_process: each process's this_host(), by process index."""
  now = datetime.datetime.now(datetime.timezone.utc)
  per_process = [sum(1 for d in devices if d.process_index == i)
                 for i in range(len(hosts_by_process))]
  return {
      'date': now.strftime('%Y-%m-%dT%H:%M:%SZ'),
      'commit': commit(),
      'command': command(),
      'platform': devices[0].platform,
      'device_kind': devices[0].device_kind,
      'process_count': len(hosts_by_process),
      'device_count': len(devices),
      'devices_per_process': per_process,
      'host_names': [h['host_name'] for h in hosts_by_process],
      'cpu_model': hosts_by_process[0]['cpu_model'],
      'cpu_count': hosts_by_process[0]['cpu_count'],
      'memory_gib': hosts_by_process[0]['memory_gib'],
      'environment': {k: os.environ[k] for k in ENVIRONMENT if k in os.environ},
  }
