"""The pinned GPU install: requirements-cuda12.txt and requirements-cuda13.txt
pin jax's CUDA plugin at the version of jax and jaxlib in requirements.txt,
pip resolves each pinned set to exactly its pins, and the Makefile's ACCEL
picks the file and reinstalls when it changes."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO

ACCELS = ('cuda12', 'cuda13')
_PIN = re.compile(r'^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)$')
# pip's words for an index it cannot reach (the CI machine reaches PyPI).
_UNREACHABLE = ('NewConnectionError', 'Failed to establish a new connection',
                'Temporary failure in name resolution', 'Network is unreachable',
                'ConnectTimeoutError', 'Max retries exceeded', 'ReadTimeoutError')


def _env(**extra) -> dict:
  """This environment without what a surrounding `make test ACCEL=...` passes
  down to the commands the tests start (its variables and MAKEFLAGS)."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('ACCEL', 'MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}
  return {**env, **extra}


def _normalized(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def _lines(file_name: str) -> list[str]:
  """The requirement lines of a file: no comments, no blank lines."""
  with open(os.path.join(REPO, file_name)) as f:
    return [line.split('#')[0].strip() for line in f if line.split('#')[0].strip()]


def _pins(lines) -> dict[str, tuple[str, str]]:
  """{normalized name: (extras, version)} of the `name[extras]==version` lines."""
  pins = {}
  for line in lines:
    if line.startswith('-r '):
      continue
    match = _PIN.match(line)
    assert match, f'not pinned with ==: {line}'
    pins[_normalized(match[1])] = (match[2] or '', match[3])
  return pins


@pytest.mark.parametrize('accel', ACCELS)
def test_cuda_file_is_the_cpu_set_plus_pins(accel):
  lines = _lines(f'requirements-{accel}.txt')
  assert lines[0] == '-r requirements.txt'
  assert [line for line in lines if line.startswith('-')] == ['-r requirements.txt']
  _pins(lines)  # every other line pinned with ==


@pytest.mark.parametrize('accel', ACCELS)
def test_cuda_plugin_pins_equal_the_jax_and_jaxlib_pins(accel):
  cpu = _pins(_lines('requirements.txt'))
  cuda = _pins(_lines(f'requirements-{accel}.txt'))
  jax_version = cpu['jax'][1]
  assert cpu['jaxlib'][1] == jax_version
  assert cuda[f'jax-{accel}-plugin'] == ('[with-cuda]', jax_version)
  assert cuda[f'jax-{accel}-pjrt'] == ('', jax_version)
  assert not set(cuda) & set(cpu), 'a package pinned in both files'


def _dry_run(requirements_file: str) -> subprocess.CompletedProcess:
  """pip's resolution of a requirements file for this interpreter and
  platform, as a JSON report on standard output; nothing is installed.

  fast-deps reads each wheel's metadata with HTTP range requests: the NVIDIA
  wheels (hundreds of MB each) publish no separate metadata file, so without
  it pip downloads them all. A pip that no longer knows the option gets the
  plain command.
  """
  command = [sys.executable, '-m', 'pip', 'install', '--dry-run', '--ignore-installed',
             '--quiet', '--report', '-', '--timeout', '30', '--retries', '2',
             '--disable-pip-version-check', '-r', requirements_file]
  for feature in (['--use-feature=fast-deps'], []):
    result = subprocess.run(command + feature, capture_output=True, text=True,
                            timeout=900)
    if not (feature and 'invalid choice' in result.stderr):
      return result
  return result


@pytest.mark.parametrize('accel', ACCELS)
def test_pinned_cuda_set_resolves_to_exactly_its_pins(accel, tmp_path):
  # The pins of the CUDA file alone (requirements.txt resolves on every
  # `make test`), with their dependencies: the resolver must find every pin
  # for this Python and platform, each within the plugin's ranges, and need
  # nothing that is not pinned.
  pins = _pins(_lines(f'requirements-{accel}.txt'))
  requirements = tmp_path / 'requirements.txt'
  requirements.write_text(''.join(
      f'{name}{extras}=={version}\n' for name, (extras, version) in pins.items()))
  result = _dry_run(str(requirements))
  unreachable = [line for line in result.stderr.splitlines()
                 if any(word in line for word in _UNREACHABLE)]
  if result.returncode and unreachable:
    pytest.skip(f'package index unreachable: {unreachable[0].strip()}')
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(result.stdout)
  resolved = {_normalized(item['metadata']['name']): item['metadata']['version']
              for item in report['install']}
  print(f'{accel}: {json.dumps(resolved, sort_keys=True)}')
  assert resolved == {name: version for name, (_, version) in pins.items()}


# --- The Makefile -------------------------------------------------------------


def _make_in_copy(tmp_path):
  """A copy of the Makefile and requirement files with a stand-in .venv whose
  python records its arguments; returns make(*args) -> (returncode,
  calls, stderr) and the stamp's path."""
  for name in ('Makefile', 'requirements.txt',
               *(f'requirements-{a}.txt' for a in ACCELS)):
    shutil.copy(os.path.join(REPO, name), tmp_path / name)
    os.utime(tmp_path / name, (0, 0))  # older than any stamp
  python = tmp_path / '.venv' / 'bin' / 'python'
  python.parent.mkdir(parents=True)
  log = tmp_path / 'calls.log'
  python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
  python.chmod(0o755)
  stamp = tmp_path / '.venv' / '.installed'
  stamp.write_text('')  # a CPU install, as `touch` made it before ACCEL

  def make(*args):
    log.write_text('')
    result = subprocess.run(['make', '-s', 'test', *args], cwd=tmp_path, env=_env(),
                            capture_output=True, text=True, timeout=60)
    return result.returncode, log.read_text().splitlines(), result.stderr
  return make, stamp


_TESTS = '-m pytest -q -n auto --dist loadfile tests'


@pytest.mark.skipif(shutil.which('make') is None, reason='no make here')
def test_make_installs_the_accel_file_and_reinstalls_when_accel_changes(tmp_path):
  make, stamp = _make_in_copy(tmp_path)
  # CPU on a CPU install: the tests only, as before ACCEL existed.
  assert make() == (0, [_TESTS], '')
  code, calls, _ = make('ACCEL=cuda12')
  assert code == 0 and stamp.read_text() == 'cuda12'
  assert '-m pip uninstall --quiet --yes jax-cuda13-plugin jax-cuda13-pjrt' in calls
  assert '-m pip install --quiet -r requirements-cuda12.txt' in calls
  assert make('ACCEL=cuda12')[1] == [_TESTS]  # installed for it already
  code, calls, _ = make()  # back to CPU: the plugins go
  assert code == 0 and stamp.read_text() == ''
  assert ('-m pip uninstall --quiet --yes jax-cuda12-plugin jax-cuda12-pjrt '
          'jax-cuda13-plugin jax-cuda13-pjrt') in calls
  assert '-m pip install --quiet -r requirements.txt' in calls
  assert make('ACCEL=cuda13')[0] == 0 and stamp.read_text() == 'cuda13'
  edited = stamp.stat().st_mtime + 10  # a requirements file newer than the stamp
  os.utime(tmp_path / 'requirements-cuda13.txt', (edited, edited))
  code, calls, _ = make('ACCEL=cuda13')
  assert code == 0 and calls == ['-m pip install --quiet --upgrade pip',
                                 '-m pip install --quiet -r requirements-cuda13.txt',
                                 _TESTS]


@pytest.mark.skipif(shutil.which('make') is None, reason='no make here')
@pytest.mark.parametrize('accel', ['cuda11', 'cpu', 'cuda12 cuda13'])
def test_make_rejects_an_unknown_accel_with_one_line(tmp_path, accel):
  make, stamp = _make_in_copy(tmp_path)
  code, calls, stderr = make(f'ACCEL={accel}')
  assert code == 2 and calls == [] and stamp.read_text() == ''
  assert len(stderr.strip().splitlines()) == 1 and 'cuda12' in stderr


# --- The GPU check's scripts (benchmarks/gpu_bench.sh, scripts/gpu_bundle.sh) -


_SCRIPTS = ('benchmarks/gpu_bench.sh', 'scripts/gpu_bundle.sh')


@pytest.mark.parametrize('script', _SCRIPTS)
def test_script_parses(script):
  result = subprocess.run(['bash', '-n', os.path.join(REPO, script)],
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr


@pytest.mark.parametrize('args, message', [
    ((), 'usage: benchmarks/gpu_bench.sh OUT.jsonl'),
    (('/nonexistent-dir/out.jsonl',), 'error: --out=/nonexistent-dir/out.jsonl'),
])
def test_gpu_bench_without_a_writable_out_file_exits_2_with_one_line(args, message):
  result = subprocess.run([os.path.join(REPO, 'benchmarks/gpu_bench.sh'), *args],
                          env=_env(PYTHON=sys.executable), capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [result.stderr.strip()]
  assert result.stderr.startswith(message)


def test_gpu_bundle_refuses_a_folder_that_is_not_empty(tmp_path):
  (tmp_path / 'results.jsonl').write_text('{}\n')
  result = subprocess.run([os.path.join(REPO, 'scripts/gpu_bundle.sh'), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 2 and 'not empty' in result.stderr
  assert os.listdir(tmp_path) == ['results.jsonl']


def test_gpu_bundle_holds_the_code_and_wheels_run_sh_installs_when_missing(tmp_path):
  bundle = tmp_path / 'bundle'
  result = subprocess.run([os.path.join(REPO, 'scripts/gpu_bundle.sh'), str(bundle)],
                          env=_env(PYTHON=sys.executable),
                          capture_output=True, text=True, timeout=300)
  unreachable = [line for line in result.stderr.splitlines()
                 if any(word in line for word in _UNREACHABLE)]
  if result.returncode and unreachable:
    pytest.skip(f'package index unreachable: {unreachable[0].strip()}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert './run.sh' in result.stdout
  assert (bundle / 'imagetrain' / 'main.py').is_file()
  assert (bundle / 'imagetrain' / 'BUNDLE_COMMIT').read_text().strip()
  wheels = dict(line.split() for line in (bundle / 'wheels' / 'modules.txt').read_text()
                .splitlines())
  assert sorted(wheels.values()) == ['ml_collections', 'yaml']
  assert all((bundle / 'wheels' / wheel).is_file() for wheel in wheels)
  assert sum(f.stat().st_size for f in bundle.rglob('*') if f.is_file()) < 50 * 2**20
  # This Python has ml_collections, so run.sh installs nothing; a module it
  # lacks gets its wheel installed into site/. No OUT: gpu_bench.sh's usage.
  ml_collections_wheel = next(w for w, m in wheels.items() if m == 'ml_collections')
  with open(bundle / 'wheels' / 'modules.txt', 'a') as f:
    f.write(f'{ml_collections_wheel} module_this_python_lacks\n')
  result = subprocess.run([str(bundle / 'run.sh')], env=_env(PYTHON=sys.executable),
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stderr.startswith('usage: benchmarks/gpu_bench.sh')
  version = ml_collections_wheel.split('-')[1]
  assert sorted(os.listdir(bundle / 'site')) == [
      'ml_collections', f'ml_collections-{version}.dist-info']
