"""The work dir: one owner at a time (coordination/workdir_lock.py), --mode=eval
beside it writing nothing, fault-injection keys that are never saved, and
--workdir=~/x meaning the home folder's x."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from cli import config_loader
from cli import validation
from configs import default
from configs import schema
from coordination import workdir_lock
from core.errors import UsageError
from modes import bench
from modes import eval as eval_mode
from planner import plan
from planner import study
from probe import run as probe_run
from tests.helpers import REPO, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import checkpointing
from trainer import experiment
from trainer import state as state_lib
from trainer import train

# Holds the lock of argv[1] until a line arrives on stdin, then leaves the
# way argv[2] says: as a run that ends, fails, or stops after a save (75).
_HOLDER = """
import sys
from coordination import workdir_lock
with workdir_lock.hold(sys.argv[1], 'train'):
  print('held', flush=True)
  sys.stdin.readline()
  if sys.argv[2] == 'fails':
    raise RuntimeError('the failure of the owner')
  if sys.argv[2] == 'stops':
    sys.exit(75)
"""


def _start_owner(workdir, ending='ends'):
  """Another process holding the work dir's lock."""
  process = subprocess.Popen([sys.executable, '-c', _HOLDER, str(workdir), ending],
                             cwd=REPO, text=True, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert process.stdout.readline() == 'held\n', process.communicate()[1]
  return process


@pytest.fixture
def owners():
  started = []
  yield lambda *args: started.append(_start_owner(*args)) or started[-1]
  for process in started:
    process.kill()
    process.wait()


def _lock_path(workdir):
  return os.path.join(workdir, workdir_lock.LOCK_FILE_NAME)


def _lock_owner(workdir):
  with open(_lock_path(workdir)) as f:
    return json.load(f)


def _write_lock(workdir, **changes):
  """A lock file as a run would write it, with `changes` to its record."""
  os.makedirs(workdir, exist_ok=True)
  record = {**workdir_lock._owner_record('train'), **changes}  # pylint: disable=protected-access
  with open(_lock_path(workdir), 'w') as f:
    json.dump(record, f)
  return record


def _snapshot(directory):
  """Every file and folder under `directory`, with its size and mtime (but
  the lock's, which its owner touches now and then)."""
  found = {}
  for root, dirs, files in os.walk(directory):
    for name in dirs + files:
      path = os.path.join(root, name)
      info = os.stat(path)
      found[os.path.relpath(path, directory)] = (
          info.st_size, None if name == workdir_lock.LOCK_FILE_NAME else info.st_mtime_ns)
  return found


# --- One owner ----------------------------------------------------------------


def test_a_held_work_dir_is_refused_naming_its_host_and_pid_until_the_owner_exits(
    tmp_path, owners):
  endings = {'ends': 0, 'fails': 1, 'stops': 75}  # how the owner leaves: exit code
  workdirs = {ending: str(tmp_path / ending) for ending in endings}
  started = {ending: owners(workdirs[ending], ending) for ending in endings}
  for ending, code in endings.items():
    workdir, owner = workdirs[ending], started[ending]
    with pytest.raises(UsageError) as refused:
      workdir_lock.WorkdirLock(workdir, 'train').acquire()
    line = str(refused.value)
    assert '\n' not in line
    assert f'a train run (host {socket.gethostname()}, pid {owner.pid}, ' in line

    owner.communicate('\n')
    assert owner.returncode == code, ending
    assert not os.path.exists(_lock_path(workdir)), ending  # released on the way out
    lock = workdir_lock.WorkdirLock(workdir, 'train')
    lock.acquire()
    assert _lock_owner(workdir)['pid'] == os.getpid()
    lock.release()


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_warning(tmp_path, owners, caplog):
  workdir = str(tmp_path / 'run')
  owner = owners(workdir)
  owner.send_signal(signal.SIGKILL)  # no handler runs: the lock stays
  owner.wait()
  assert _lock_owner(workdir)['pid'] == owner.pid

  lock = workdir_lock.WorkdirLock(workdir, 'train')
  with caplog.at_level(logging.WARNING):
    lock.acquire()
  assert _lock_owner(workdir)['pid'] == os.getpid()
  assert f'pid {owner.pid}' in caplog.text and 'its process is gone' in caplog.text
  lock.release()
  assert os.listdir(workdir) == []


def test_a_lock_whose_pid_now_belongs_to_another_process_is_stale(tmp_path, owners):
  workdir = str(tmp_path / 'run')
  live = owners(str(tmp_path / 'elsewhere'))  # some live process and its pid
  ticks = workdir_lock._process_start_ticks(live.pid)  # pylint: disable=protected-access
  if ticks is None:
    pytest.skip('no /proc: process start times are unknown here')
  _write_lock(workdir, pid=live.pid, pid_start_ticks=ticks)
  with pytest.raises(UsageError, match=f'pid {live.pid}'):
    workdir_lock.WorkdirLock(workdir, 'train').acquire()

  _write_lock(workdir, pid=live.pid, pid_start_ticks=ticks - 1)  # an earlier holder
  lock = workdir_lock.WorkdirLock(workdir, 'train')
  lock.acquire()
  assert _lock_owner(workdir)['pid'] == os.getpid()
  lock.release()


@pytest.mark.parametrize('kind', ['another host', 'unreadable'])
def test_a_lock_this_host_cannot_check_is_held_until_its_lease_runs_out(tmp_path, kind):
  workdir = str(tmp_path / 'run')
  if kind == 'another host':
    _write_lock(workdir, host='elsewhere', pid=1)
  else:
    os.makedirs(workdir)
    open(_lock_path(workdir), 'w').close()  # as a crash between create and write leaves it
  with pytest.raises(UsageError) as refused:
    workdir_lock.WorkdirLock(workdir, 'train').acquire()
  assert f'delete {_lock_path(workdir)}' in str(refused.value)

  untouched = time.time() - workdir_lock.LEASE_S - 60
  os.utime(_lock_path(workdir), (untouched, untouched))
  lock = workdir_lock.WorkdirLock(workdir, 'train')
  lock.acquire()
  assert _lock_owner(workdir)['pid'] == os.getpid()
  lock.release()


def test_the_owner_keeps_touching_its_lock(tmp_path):
  workdir = str(tmp_path / 'run')
  lock = workdir_lock.WorkdirLock(workdir, 'train', refresh_s=0.05)
  lock.acquire()
  os.utime(lock.path, (0, 0))
  deadline = time.monotonic() + 60
  while os.stat(lock.path).st_mtime == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
  touched = os.stat(lock.path).st_mtime
  lock.release()
  assert touched > 0


def test_a_run_that_fails_at_start_leaves_no_work_dir_it_created(tmp_path):
  created = tmp_path / 'new' / 'run'
  with pytest.raises(RuntimeError):
    with workdir_lock.hold(str(created), 'train'):
      assert os.path.exists(_lock_path(created))
      raise RuntimeError('a config that does not fit')
  assert os.listdir(tmp_path) == []

  existing = tmp_path / 'mine'
  existing.mkdir()
  with workdir_lock.hold(str(existing), 'train'):
    pass
  assert existing.is_dir() and os.listdir(existing) == []


def test_every_process_of_a_run_stops_with_process_0s_line(tmp_path):
  """Process 0 takes the lock; the others learn from it whether it did."""
  workdir = str(tmp_path / 'run')
  rows, barrier = [None, None], threading.Barrier(2)

  def allgather_of(process):
    def allgather(array):
      rows[process] = array
      barrier.wait()
      gathered = np.stack(rows)
      barrier.wait()
      return gathered
    return allgather

  def run(process, outcomes):
    try:
      with workdir_lock.hold(workdir, 'train', process_index=process, process_count=2,
                             allgather=allgather_of(process)) as lock:
        outcomes[process] = lock
    except UsageError as e:
      outcomes[process] = str(e)

  def run_both():
    outcomes = [None, None]
    threads = [threading.Thread(target=run, args=(p, outcomes)) for p in (0, 1)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    return outcomes

  held, not_held = run_both()
  assert isinstance(held, workdir_lock.WorkdirLock) and not_held is None

  other = workdir_lock.WorkdirLock(workdir, 'bench')
  other.acquire()
  refused = run_both()
  other.release()
  assert refused[0] == refused[1] and 'in use by a bench run' in refused[0]


def _on_synthetic_data(config):
  config.data.source = 'synthetic'
  return config


@pytest.mark.parametrize('mode,run', [
    ('train', train.train_and_evaluate), ('bench', bench.run_bench),
    ('plan', plan.run_plan),
    ('study', lambda config, workdir: study.run_study(config, workdir,
                                                      validation.check_study_cell)),
    ('probe', lambda config, workdir: probe_run.run_probe(
        _on_synthetic_data(config), workdir))],
    ids=['train', 'bench', 'plan', 'study', 'probe'])
def test_every_mode_that_writes_refuses_a_held_work_dir_before_any_work(
    tmp_path, mode, run):
  del mode
  workdir = str(tmp_path / 'run')
  owner = workdir_lock.WorkdirLock(workdir, 'train')
  owner.acquire()
  before = _snapshot(workdir)
  try:
    with pytest.raises(UsageError, match='is in use by a train run'):
      run(default.get_config(), workdir)
    assert _snapshot(workdir) == before
  finally:
    owner.release()


def test_a_second_training_run_exits_2_with_one_line_naming_the_owner(tmp_path, owners):
  """Through main.py, with the work dir spelled ~/run: --workdir is
  expanded once, so the run finds the lock in $HOME/run."""
  home, cwd = tmp_path / 'home', tmp_path / 'cwd'
  cwd.mkdir()
  owner = owners(str(home / 'run'))
  before = _snapshot(home)
  result = _main(home, cwd, '--workdir=~/run', *tiny_synthetic_run_flags()[1:])
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith('error:')]
  assert errors == [result.stderr.strip().splitlines()[-1]]
  assert errors[0].startswith(f'error: --workdir={home / "run"} is in use by a train run '
                              f'(host {socket.gethostname()}, pid {owner.pid}, ')
  assert _snapshot(home) == before
  assert os.listdir(cwd) == []  # no folder named ~


# --- The work dir's path ------------------------------------------------------


def _main(home, cwd, *args):
  env = dict(os.environ, HOME=str(home), XLA_FLAGS=xla_flags(8), TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run([sys.executable, os.path.join(REPO, 'main.py'), *args],
                        cwd=cwd, env=env, text=True, capture_output=True, timeout=600)


def test_a_tilde_workdir_is_read_in_the_home_folder(tmp_path):
  home, cwd = tmp_path / 'home', tmp_path / 'cwd'
  cwd.mkdir()
  saved = default.get_config()
  saved.seed = 7
  os.makedirs(home / 'x')
  schema.save(saved, str(home / 'x'))
  result = _main(home, cwd, '--workdir=~/x', '--print_config')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'seed = 7' in result.stdout.splitlines()
  assert os.listdir(cwd) == []


# --- Fault injection applies to one run ---------------------------------------


def test_debug_keys_are_never_saved_and_a_rerun_without_them_injects_nothing(tmp_path):
  config = default.get_config()
  config.debug.pause_at_step, config.debug.nan_at_step = 3, 2
  config.debug.fail_at_step, config.debug.fail_process = 4, -1
  config.num_train_steps = 9  # a key that is saved
  schema.save(config, str(tmp_path))
  with open(tmp_path / schema.CONFIG_FILE_NAME) as f:
    saved = json.load(f)
  assert saved['num_train_steps'] == 9
  assert not [key for key in saved if key.startswith('debug.')]

  rerun = config_loader.build_config(None, [], str(tmp_path), 'unused.py')
  assert rerun.num_train_steps == 9
  assert rerun.debug.to_dict() == default.get_config().debug.to_dict()
  # A rerun may still inject a fault of its own.
  paused = config_loader.build_config(None, [('debug.pause_at_step', '5')], str(tmp_path),
                                      'unused.py')
  assert paused.debug.pause_at_step == 5


def test_debug_keys_in_an_earlier_versions_config_json_are_ignored(tmp_path):
  values = schema.dotted_items(default.get_config())
  values.update({'debug.pause_at_step': 3, 'debug.nan_at_step': 2})
  with open(tmp_path / schema.CONFIG_FILE_NAME, 'w') as f:
    json.dump(values, f)
  loaded = schema.load_saved(str(tmp_path))
  assert loaded.debug.pause_at_step == -1 and loaded.debug.nan_at_step == -1


# --- What may change in a work dir ---------------------------------------------


def test_a_rerun_may_switch_engine_and_set_the_engines_own_sections(tmp_path):
  saved = default.get_config()
  saved.network.num_workers, saved.network.bandwidth_gbps = 4, 8.0  # an SPMD run's links
  schema.save(saved, str(tmp_path))
  switched = config_loader.build_config(
      None, [('engine', 'allreduce'), ('network.num_workers', '2'),
             ('network.bandwidth_gbps', '1'), ('network.devices_per_host', '2'),
             ('allreduce.algorithm', 'hierarchical'), ('ps.num_shards', '2'),
             ('sharding_rules', 'DATA_PARALLEL')], str(tmp_path), 'unused.py')
  assert (switched.engine, switched.network.num_workers, switched.network.bandwidth_gbps,
          switched.allreduce.algorithm) == ('allreduce', 2, 1.0, 'hierarchical')
  # What the checkpoints mean must still match.
  with pytest.raises(UsageError, match="model.name: saved 'resnet18', requested 'resnet34'"):
    config_loader.build_config(None, [('model.name', 'resnet34')], str(tmp_path), 'unused.py')


# --- --mode=eval only reads ---------------------------------------------------


def _tiny_config():
  config = default.get_config()
  config.model.name, config.model.width = 'resnet18', 4
  config.data.update(dict(source='synthetic', image_size=16, augment='none',
                          num_synthetic_examples=16, num_synthetic_classes=5))
  config.batch_size = config.eval.batch_size = 8
  return config


def test_eval_beside_the_owner_writes_nothing_into_the_work_dir(tmp_path):
  workdir = str(tmp_path / 'run')
  config = _tiny_config()
  owner = workdir_lock.WorkdirLock(workdir, 'train')  # training goes on
  owner.acquire()
  try:
    schema.save(config, workdir)
    exp = experiment.build_experiment(config, workdir)
    state = state_lib.create_train_state(exp.model, exp.tx, 16, exp.state_shardings, seed=0)
    checkpointer = checkpointing.Checkpointer(workdir)
    checkpointer.save(3, state, {'step': 3})
    checkpointer.close()
    before = _snapshot(workdir)
    summary = eval_mode.evaluate_checkpoint(config, workdir)
    assert summary['step'] == 3 and summary['num_examples'] == 16
    assert _snapshot(workdir) == before
  finally:
    owner.release()


def test_eval_of_a_work_dir_without_checkpoints_creates_nothing(tmp_path):
  schema.save(_tiny_config(), str(tmp_path))
  before = _snapshot(tmp_path)
  with pytest.raises(UsageError, match='no checkpoint to evaluate'):
    eval_mode.evaluate_checkpoint(_tiny_config(), str(tmp_path))
  assert _snapshot(tmp_path) == before  # no checkpoints/ folder either
