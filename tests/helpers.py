"""Shared by the tests: running main.py as a user would, and data sets."""

import itertools
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*args: str, timeout: float = 600, env: dict | None = None,
             background: bool = False):
  """Runs `python main.py ARGS` from the repository root with 8 CPU devices."""
  full_env = _main_env(env)
  command = [sys.executable, os.path.join(REPO, 'main.py'), *args]
  if background:
    return subprocess.Popen(command, cwd=REPO, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  return subprocess.run(command, cwd=REPO, env=full_env, text=True,
                        capture_output=True, timeout=timeout)


def run_main_many(invocations: list[list[str]], timeout: float = 600,
                  env: dict | None = None) -> list[subprocess.CompletedProcess]:
  """main.py on each argument list, as run_main runs it, in children forked
  from one process that imported main.py once (tests/main_batch.py): for
  many short invocations, such as bad flags that exit 2."""
  full_env = _main_env(env)
  with tempfile.TemporaryDirectory() as scratch:
    results_path = os.path.join(scratch, 'results.json')
    batch = subprocess.run(
        [sys.executable, os.path.join(REPO, 'tests', 'main_batch.py'), results_path],
        cwd=REPO, env=full_env, text=True, capture_output=True, timeout=timeout, check=False,
        input=json.dumps([[str(a) for a in args] for args in invocations]))
    if batch.returncode:
      raise RuntimeError(f'tests/main_batch.py failed: {batch.stderr[-3000:]}')
    with open(results_path) as f:
      results = json.load(f)
  main_py = os.path.join(REPO, 'main.py')
  return [subprocess.CompletedProcess([sys.executable, main_py, *args], r['returncode'],
                                      r['stdout'], r['stderr'])
          for args, r in zip(invocations, results)]


def _main_env(env: dict | None) -> dict:
  """This environment with 8 CPU devices and TensorFlow quiet, then `env`."""
  full_env = dict(os.environ, XLA_FLAGS=xla_flags(8), TF_CPP_MIN_LOG_LEVEL='3')
  full_env.update(env or {})
  return full_env


def xla_flags(num_devices: int) -> str:
  """The session's XLA flags (tests/conftest.py) with `num_devices` CPU devices."""
  from cli import launcher  # pylint: disable=g-import-not-at-top
  return launcher.with_cpu_devices(os.environ.get('XLA_FLAGS', ''), num_devices)


def create_dataset(data, batch_size=8, eval_batch_size=4, seed=0, **kwargs):
  """input_pipeline.create_dataset with the small batches the tests use."""
  import input_pipeline  # pylint: disable=g-import-not-at-top
  return input_pipeline.create_dataset(
      data, batch_size=batch_size, eval_batch_size=eval_batch_size, seed=seed,
      **kwargs)


def take(iterator, n: int) -> list:
  return list(itertools.islice(iterator, n))
