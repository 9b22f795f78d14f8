"""Shared by the tests: running main.py as a user would, and data sets."""

import itertools
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*args: str, timeout: float = 600, env: dict | None = None,
             background: bool = False):
  """Runs `python main.py ARGS` from the repository root with 8 CPU devices."""
  full_env = dict(os.environ)
  full_env['XLA_FLAGS'] = xla_flags(8)
  full_env['TF_CPP_MIN_LOG_LEVEL'] = '3'
  full_env.update(env or {})
  command = [sys.executable, os.path.join(REPO, 'main.py'), *args]
  if background:
    return subprocess.Popen(command, cwd=REPO, env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  return subprocess.run(command, cwd=REPO, env=full_env, text=True,
                        capture_output=True, timeout=timeout)


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
