"""Processes that do not see the same run stop at once, all with one line.

Each process works out for itself, from its own view of the file system, the
checkpoint it resumes from and the data's size; if those differed, the
collectives would stop matching while every process stayed alive. Two
processes started by hand (as a cluster starts them), each told something
different, must both end before the first step, naming what differs and
where.
"""

import os

import numpy as np
import pytest

from configs import default
from coordination import agreement
from core.errors import RunFailure, UsageError
from tests.helpers import run_main, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import checkpointing


def _view(config=None, **facts):
  config = config if config is not None else default.get_config()
  return {'config': agreement.comparable_config(config), 'facts': facts}


def test_processes_that_agree_pass():
  views = [_view(num_train_examples=600, resume_step=None, total_steps=8)] * 3
  assert agreement.first_difference(views) is None


def test_a_config_key_that_differs_is_named_with_both_values_and_the_process():
  other = default.get_config()
  other.seed = 7
  error = agreement.first_difference([_view(), _view(), _view(other)])
  assert isinstance(error, UsageError)
  assert str(error) == ('processes disagree on config key seed: 7 on process 2, '
                        '0 on process 0; start every process with the same command')


def test_data_of_another_size_is_bad_input_and_checkpoints_a_storage_fault():
  sizes = [_view(num_train_examples=5000, resume_step=8),
           _view(num_train_examples=4990, resume_step=4)]
  error = agreement.first_difference(sizes)
  assert isinstance(error, UsageError)  # the data come first: the step follows from them
  assert 'the number of training examples: 4990 on process 1, 5000 on process 0' in str(error)

  steps = [_view(num_train_examples=5000, resume_step=8),
           _view(num_train_examples=5000, resume_step=None)]
  error = agreement.first_difference(steps)
  assert isinstance(error, RunFailure)
  assert 'the step to resume from: none on process 1, 8 on process 0' in str(error)


def test_paths_on_each_host_may_differ():
  other = default.get_config()
  other.data.dir, other.runtime.compilation_cache_dir = '/mnt/data', '/local/cache'
  assert agreement.first_difference([_view(), _view(other)]) is None


def test_gather_json_returns_this_process_value_alone():
  assert agreement.gather_json({'a': [1, 'é']}) == [{'a': [1, 'é']}]


def _two_processes(workdirs, per_process_flags, flags):
  """Starts main.py as processes 0 and 1 of one run (1 device each) and
  returns their (exit code, standard error)."""
  from cli.launcher import free_port  # pylint: disable=g-import-not-at-top
  address = f'127.0.0.1:{free_port()}'
  processes = [run_main(f'--workdir={workdirs[i]}', *flags, *per_process_flags[i],
                        f'--coordinator_address={address}', '--num_processes=2',
                        f'--process_id={i}', background=True,
                        env={'XLA_FLAGS': xla_flags(1)})
               for i in range(2)]
  results = []
  try:
    for process in processes:
      _, stderr = process.communicate(timeout=300)
      results.append((process.returncode, stderr))
    return results
  finally:
    for process in processes:  # left running only when the test failed
      if process.poll() is None:
        process.kill()


def _last_line(stderr: str) -> str:
  return stderr.strip().splitlines()[-1]


def test_processes_given_different_data_stop_before_the_first_step_writing_nothing(
    tmp_path):
  workdir = str(tmp_path / 'run')
  results = _two_processes(
      [workdir, workdir],
      [['--config.data.num_synthetic_examples=600'],
       ['--config.data.num_synthetic_examples=1200']],
      tiny_synthetic_run_flags(num_train_steps=100000))
  for index, (code, stderr) in enumerate(results):
    assert code == 2, stderr[-3000:]
    assert _last_line(stderr) == (
        f'error: process {index}: processes disagree on config key '
        'data.num_synthetic_examples: 1200 on process 1, 600 on process 0; start '
        'every process with the same command')
    assert 'Traceback' not in stderr
  assert not os.path.exists(workdir) or os.listdir(workdir) == []


def test_processes_that_see_different_checkpoints_stop_naming_the_steps(tmp_path):
  # Shared storage on which one host does not show the newest checkpoint
  # yet: here, two work dirs, with checkpoints 2 and 4, and 2 alone.
  seen, behind = str(tmp_path / 'seen'), str(tmp_path / 'behind')
  for workdir, steps in ((seen, (2, 4)), (behind, (2,))):
    checkpointer = checkpointing.Checkpointer(workdir, async_save=False)
    for step in steps:
      checkpointer.save(step, {'w': np.zeros(2, np.float32)}, {'step': step})
    checkpointer.close()
  results = _two_processes([seen, behind], [[], []],
                           tiny_synthetic_run_flags(num_train_steps=100000))
  for index, (code, stderr) in enumerate(results):
    assert code == 1, stderr[-3000:]
    assert _last_line(stderr) == (
        f'error: process {index}: processes disagree on the step to resume from: '
        '2 on process 1, 4 on process 0; every process must see the same checkpoints '
        '(on shared storage, one may not show a checkpoint yet)')
  for workdir in (seen, behind):
    assert os.listdir(workdir) == ['checkpoints']


@pytest.mark.parametrize('key', sorted(agreement.PER_PROCESS_KEYS))
def test_per_process_keys_are_declared(key):
  section, name = key.split('.')
  assert name in default.get_config()[section]
