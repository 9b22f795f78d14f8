"""The parameter-server engine when something fails: a failure in any of its
threads ends the step with its cause, close() leaves no thread behind (or
says loudly which one it could not stop), and workers that do not fit their
devices are refused before anything is written."""

import concurrent.futures
import itertools
import logging
import re
import threading

import jax
import numpy as np
import pytest

from core.errors import RunFailure, UsageError
from tests.helpers import run_main
from tests.test_end_to_end import tiny_synthetic_run_flags
from tests.test_ps_engine import BATCH, IMAGE_SIZE, NUM_CLASSES, _config
from trainer import device_input
from trainer import engines
from trainer import experiment
from trainer import state as state_lib
from trainer.engines.ps import cluster as cluster_lib
from trainer.engines.emulation import link
from trainer.engines.ps import shard as shard_lib
from trainer.engines.emulation import threads

# A bound on waiting for a failure to surface, so that a hang fails the test
# instead of the suite's timeout: a step of this model takes well under 1 s.
_HANG_S = 60


class InjectedFault(BaseException):
  """Not an Exception: what a bare `except Exception` lets through."""


def _ps_config(mode: str, **overrides):
  # A 2-block ViT: the engine's code is what is tested; its programs compile
  # and its parameters initialise in about a second each under the tests'
  # XLA flags (AlexNet's wide dense layers take over ten to initialise).
  return _config('ps', 'vit_ti16', **{
      'network.num_workers': 2, 'ps.num_shards': 2, 'ps.mode': mode, **overrides})


@pytest.fixture(scope='module')
def initial_state():
  """The models' initial state on the host, the same for every engine here."""
  config = _ps_config('sync')
  exp = experiment.build_experiment(config, '/nonexistent')
  return jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, IMAGE_SIZE, exp.state_shardings, config.seed))


def _started_engine(config, state):
  engine = engines.create_engine(experiment.build_experiment(config, '/nonexistent'))
  engine.start(state)
  return engine


def _batches(engine):
  rng = np.random.default_rng(0)
  while True:
    batch = {'image': rng.integers(0, 256, (BATCH, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8),
             'label': rng.integers(0, NUM_CLASSES, (BATCH,), np.int32)}
    yield device_input.to_global(batch, engine.batch_sharding)


def _train_steps(engine, num_steps: int) -> None:
  batches = _batches(engine)
  for _ in range(num_steps):
    engine.step(next(batches))
  engine.collect_metrics()


def _failing_on_call(original, nth: int, error: BaseException):
  """`original`, except that its nth call raises `error` (once)."""
  calls = itertools.count(1)

  def fn(*args, **kwargs):
    if next(calls) == nth:
      raise error
    return original(*args, **kwargs)
  return fn


def _new_threads(before) -> list[str]:
  return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


# (mode, where the failure is injected, the exception): the links (pull and
# push both cross them), the push and the pull themselves, and the shards'
# update, with BaseExceptions as well as Exceptions.
_FAILURES = [
    ('sync', link, 'transfer', InjectedFault('link lost')),
    ('sync', shard_lib.ServerShard, 'apply', ValueError('update failed')),
    ('async', link, 'transfer', InjectedFault('link lost')),
    ('async', shard_lib.ServerShard, 'apply_one', InjectedFault('update failed')),
    ('async', cluster_lib.Cluster, 'pull', OSError('pull failed')),
]


@pytest.mark.parametrize('mode,owner,name,error', _FAILURES,
                         ids=[f'{m}-{n}-{type(e).__name__}' for m, _, n, e in _FAILURES])
def test_a_failing_engine_thread_ends_the_step_with_its_cause_and_close_leaves_no_thread(
    monkeypatch, initial_state, mode, owner, name, error):
  before = set(threading.enumerate())
  engine = _started_engine(_ps_config(mode), initial_state)
  # The third call: after the engine has done some work of that kind.
  monkeypatch.setattr(owner, name, _failing_on_call(getattr(owner, name), 3, error))

  with concurrent.futures.ThreadPoolExecutor(1) as runner:
    steps = runner.submit(_train_steps, engine, 6)
    with pytest.raises(threads.EngineThreadFailed) as failed:
      steps.result(timeout=_HANG_S)
  assert failed.value.__cause__ is error
  assert f'{type(error).__name__}: {error}' in str(failed.value)
  engine.close()
  assert _new_threads(before) == []


def test_a_failing_all_reduce_worker_ends_the_step_with_its_cause_and_leaves_no_thread(
    monkeypatch, initial_state):
  # The same model and state; 4 workers on a ring of paced links.
  before = set(threading.enumerate())
  engine = _started_engine(_config('allreduce', 'vit_ti16', **{
      'network.num_workers': 4, 'network.bandwidth_gbps': 8.0}), initial_state)
  # A step makes 24 transfers (6 ring steps of 4 workers): the 30th is in
  # the middle of the second step's ring, while the others wait on it.
  error = InjectedFault('link lost')
  monkeypatch.setattr(link, 'transfer', _failing_on_call(link.transfer, 30, error))
  with concurrent.futures.ThreadPoolExecutor(1) as runner:
    steps = runner.submit(_train_steps, engine, 3)
    with pytest.raises(threads.EngineThreadFailed) as failed:
      steps.result(timeout=_HANG_S)
  # The worker that failed, not one that found the ring broken.
  assert failed.value.__cause__ is error
  assert 'all-reduce worker' in str(failed.value)
  engine.close()
  assert _new_threads(before) == []


def test_close_names_a_thread_it_cannot_stop_and_fails(monkeypatch, initial_state, caplog):
  before = set(threading.enumerate())
  engine = _started_engine(_ps_config('async'), initial_state)
  entered, release = threading.Event(), threading.Event()
  original = link.transfer

  def stuck_transfer(*args, **kwargs):
    entered.set()
    release.wait()
    return original(*args, **kwargs)

  monkeypatch.setattr(link, 'transfer', stuck_transfer)
  monkeypatch.setattr(threads, 'CLOSE_TIMEOUT_S', 0.5)
  engine.step(next(_batches(engine)))
  assert entered.wait(_HANG_S)
  try:
    with caplog.at_level(logging.ERROR), pytest.raises(
        RunFailure, match=r'could not stop \d+ thread\(s\).*link') as failed:
      engine.close()
  finally:
    release.set()
  threads.join(engine.cluster.thread_prefix, _HANG_S)  # they end once released
  assert _new_threads(before) == []
  # Where it is stuck: its innermost frame in the message, its stack in the log.
  assert re.search(r'within 0\.5 s: \S+ in \w+ \(\S+:\d+\)', str(failed.value))
  assert 'did not stop; its stack' in caplog.text and 'stuck_transfer' in caplog.text


def test_asynchronous_workers_that_do_not_fit_device_memory_are_refused():
  config = _ps_config('async', **{'runtime.device_memory_gib': 0.0001})
  exp = experiment.build_experiment(config, '/nonexistent')
  with pytest.raises(UsageError, match=r'workers\' gradient program does not fit.*'
                     r'GiB short.*network\.num_workers'):
    engines.create_engine(exp)


def test_a_ps_run_that_does_not_fit_device_memory_stops_before_writing(tmp_path):
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      engine='ps', **{'network.num_workers': 2}), '--config.runtime.device_memory_gib=0.0001')
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'does not fit' in error and 'GiB short' in error and 'network.num_workers' in error
  assert not workdir.exists()
