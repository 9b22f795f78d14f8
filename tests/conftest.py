"""Test-wide set-up: 8 emulated CPU devices, set before jax is imported, one
compilation cache for the session, and each test's tier (tests/tiers.py:
unit, repo or e2e) as its marker.

Most tests run main.py, and many compile the same tiny programs again (a
resume, an eval of what was just trained). JAX's persistent compilation
cache (the one `runtime.compilation_cache_dir` turns on) lets every process
of the session load a program compiled before. It starts empty each session,
so no test depends on an earlier session's programs. Under pytest-xdist
(the README's command runs one worker per core) the workers share the
controller's cache, and the shapes data set that the end-to-end tests train
on, generated once.
"""

import fcntl
import os
import shutil
import tempfile

# XLA's backend optimisations off: they take about half of the compile time
# of the tests' tiny programs, which run a few steps each, and every result
# the tests compare is computed under the same flags (main.py runs inherit
# them: tests/helpers.py).
os.environ['XLA_FLAGS'] = (
    os.environ.get('XLA_FLAGS', '') +
    ' --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# An xdist worker inherits the controller's environment, cache included.
_OWNS_CACHE = 'PYTEST_XDIST_WORKER' not in os.environ
_SHARED_DATA = 'IMAGETRAIN_TEST_SHARED_DATA'
if _OWNS_CACHE:
  # Read by JAX in this process and in every main.py the tests start.
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(
      prefix='imagetrain-test-xla-cache-')
  os.environ[_SHARED_DATA] = tempfile.mkdtemp(prefix='imagetrain-test-data-')
# Every program, however small: a run compiles about ten of under 0.5 s.
os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _OWNS_CACHE:
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
    shutil.rmtree(os.environ[_SHARED_DATA], ignore_errors=True)


@pytest.fixture(scope='session')
def shapes_dir():
  """The shapes data set, generated once for the whole session (about 10 s of
  CPU): the first worker to need it generates it, the others wait for it."""
  from input_pipeline import shapes  # pylint: disable=g-import-not-at-top
  root = os.path.join(os.environ[_SHARED_DATA], 'shapes')
  with open(root + '.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
    return shapes.ensure(root)


# The modules that take longest (pytest --durations on 2 cores), longest
# first. pytest-xdist hands out whole modules (--dist loadfile) in the
# order they are collected (pyproject.toml's --no-loadscope-reorder keeps it
# from re-sorting them by their number of tests): starting these first keeps
# a long module from being the last one left while the other workers wait.
LONGEST_FIRST = ('test_mesh_plan', 'test_launcher', 'test_end_to_end',
                 'test_mesh_plan_processes', 'test_input_stall', 'test_transfer',
                 'test_ps_end_to_end', 'test_failures', 'test_probe', 'test_plan_and_study',
                 'test_allreduce_engine', 'test_parallelism', 'test_bench',
                 'test_paper_recipes')


def pytest_collection_modifyitems(config, items):
  """Every test gets its module's tier (tests/tiers.py): `pytest -m unit`
  runs the unit tests alone. The LONGEST_FIRST modules come first."""
  del config
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable
  from tests import tiers  # pylint: disable=g-import-not-at-top
  tier_by_path = {}
  for item in items:
    path = str(item.path)
    if path not in tier_by_path:
      tier_by_path[path] = tiers.tier_of(path)
    item.add_marker(getattr(pytest.mark, tier_by_path[path]))
