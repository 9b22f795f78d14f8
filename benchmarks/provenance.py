"""What every benchmark record carries, and where the records go.

Each record a benchmark script writes gets four keys beside its measurement:
`command` (the script's argv, its path relative to the repository),
`date` (UTC, when the script started), `commit` (`git rev-parse HEAD`, with
"-dirty" when tracked files differ from it) and `hardware` (the accelerator
platform, device kind and count that JAX sees without emulation, and the
CPU and memory of the machine). `environment` adds the settings in force that
change measurements (XLA_FLAGS, GLIBC_TUNABLES, ...).

A script prints its records to standard output, one JSON line each, and
appends them to a file only when given `--out=PATH`, so that no run touches
committed results unless asked. On a working tree that differs from its
commit it warns on standard error: such records name a commit that does not
hold the code they measured (results/README.md: commit the code, then
measure; tests/test_results.py refuses such rows from 2026-12-04 on).
"""

import datetime
import json
import os
import platform
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# The project's own record of the commit, shared with --mode=probe.
from probe.provenance import commit  # pylint: disable=wrong-import-position,unused-import
OUT_HELP = ('Also append the JSON lines to this file (it may hold committed results: '
            'only when asked). Without it they go to standard output only.')
# Settings that change what a benchmark measures, recorded when set.
_ENVIRONMENT = ('XLA_FLAGS', 'GLIBC_TUNABLES', 'JAX_PLATFORMS', 'CUDA_VISIBLE_DEVICES')
_EMULATED_DEVICES = re.compile(r'--xla_force_host_platform_device_count=\S+')
# Run in a child so that this process's device emulation and accelerator
# memory stay untouched.
_DEVICES_PROGRAM = (
    'import json, jax; d = jax.devices(); print(json.dumps({"platform": d[0].platform, '
    '"device_kind": d[0].device_kind, "num_devices": len(d)}))')


def add_out_argument(parser) -> None:
  """`--out` for an argparse script; an absl script defines it in its own module,
  so that its --help lists it: flags.DEFINE_string('out', '', OUT_HELP)."""
  parser.add_argument('--out', default='', metavar='PATH', help=OUT_HELP)


def command(argv: list[str] | None = None) -> list[str]:
  """argv with the script's path relative to the repository when inside it."""
  argv = list(sys.argv if argv is None else argv)
  script = os.path.abspath(argv[0])
  if script.startswith(REPO + os.sep):
    argv[0] = os.path.relpath(script, REPO)
  return argv


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal:'):
          return round(int(line.split()[1]) / 2**20, 1)
  except OSError:
    pass
  return None


def _devices() -> dict:
  """The platform, device kind and count JAX sees here without emulated devices."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE='false', TF_CPP_MIN_LOG_LEVEL='3')
  env['XLA_FLAGS'] = _EMULATED_DEVICES.sub('', env.get('XLA_FLAGS', '')).strip()
  try:
    result = subprocess.run([sys.executable, '-c', _DEVICES_PROGRAM], env=env,
                            capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])
  except (OSError, subprocess.SubprocessError, ValueError, IndexError):
    return {'platform': 'unknown', 'device_kind': 'unknown', 'num_devices': None}


def hardware() -> dict:
  return {**_devices(), 'cpu_count': os.cpu_count(), 'cpu_model': _cpu_model(),
          'memory_gib': _memory_gib()}


DIRTY_WARNING = (
    '!' * 72 + '\nWARNING: the working tree differs from commit {commit}:\n'
    'these records will name a commit that does not hold the code they\n'
    'measure, and tests/test_results.py refuses them in results/. Commit the\n'
    'code, then measure (results/README.md).\n' + '!' * 72)


def collect(argv: list[str] | None = None) -> dict:
  """The provenance of records made now by the script of `argv`; warns on
  standard error when the working tree is dirty."""
  now = datetime.datetime.now(datetime.timezone.utc)
  made = commit()
  if made.endswith('-dirty'):
    print(DIRTY_WARNING.format(commit=made.removesuffix('-dirty')), file=sys.stderr,
          flush=True)
  return {
      'command': command(argv),
      'date': now.strftime('%Y-%m-%dT%H:%M:%SZ'),
      'commit': made,
      'hardware': hardware(),
      'environment': {k: os.environ[k] for k in _ENVIRONMENT if k in os.environ},
  }


def _check_out(path: str) -> None:
  """Exit 2 with one line when --out cannot take JSON lines, before any work."""
  problem = None
  if os.path.isdir(path):
    problem = 'is a directory; give a file to append JSON lines to'
  elif not os.path.isdir(os.path.dirname(path) or '.'):
    problem = f'its directory {os.path.dirname(path)} does not exist'
  elif not os.access(path if os.path.exists(path) else os.path.dirname(path) or '.',
                     os.W_OK):
    problem = 'is not writable'
  if problem:
    print(f'error: --out={path}: {problem}', file=sys.stderr)
    sys.exit(2)


class Results:
  """Where a script's records go: standard output, and `out` when given.

  The provenance is collected once, when the script starts; its keys replace
  same-named keys of a record (a bench record's own `date`, say), so that
  every record names the command that reproduces it.
  """

  def __init__(self, out: str = '', argv: list[str] | None = None,
               provenance: dict | None = None):
    if out:
      _check_out(out)
    self.out = out
    self.provenance = collect(argv) if provenance is None else provenance

  def write(self, record: dict) -> dict:
    full = {**record, **self.provenance}
    line = json.dumps(full)
    print(line, flush=True)
    if self.out:
      with open(self.out, 'a') as f:
        f.write(('\n' if _lacks_final_newline(self.out) else '') + line + '\n')
    return full


def _lacks_final_newline(path: str) -> bool:
  """Whether appending to `path` would glue a record onto its last line."""
  if not os.path.getsize(path):
    return False
  with open(path, 'rb') as f:
    f.seek(-1, os.SEEK_END)
    return f.read(1) != b'\n'
