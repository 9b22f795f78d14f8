"""Specification of scripts/slurm_train.sbatch: the node count comes from
sbatch; a step that stopped after a save (exit 75) requeues the job, whether
the TERM came to the batch shell (the time limit, preemption) or to the
step; a failed step keeps its exit code and is not requeued.

The script's logic runs with a fake `srun` and `scontrol` on PATH: no SLURM.
"""

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from tests.helpers import REPO

SCRIPT = os.path.join(REPO, 'scripts', 'slurm_train.sbatch')
JOB_ID = '4242'

# Records its arguments; exits $SRUN_EXIT, or, with SRUN_STOPS_ON_TERM set,
# runs until TERM, then "saves" for a moment and exits 75 like main.py.
_FAKE_SRUN = """#!/bin/bash
echo "$@" > "$FAKE_DIR/srun_args"
if [[ -n "${SRUN_STOPS_ON_TERM:-}" ]]; then
  trap 'echo TERM >> "$FAKE_DIR/srun_signals"; sleep 0.5; exit 75' TERM
  touch "$FAKE_DIR/srun_started"
  while :; do sleep 0.05; done
fi
exit "${SRUN_EXIT:-0}"
"""
_FAKE_SCONTROL = """#!/bin/bash
echo "$@" >> "$FAKE_DIR/scontrol_args"
exit "${SCONTROL_EXIT:-0}"
"""


def _fake_slurm(tmp_path, env):
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  for name, text in (('srun', _FAKE_SRUN), ('scontrol', _FAKE_SCONTROL)):
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  return {'PATH': f'{bin_dir}:{os.environ["PATH"]}', 'FAKE_DIR': str(tmp_path),
          'SLURM_SUBMIT_DIR': str(tmp_path), 'SLURM_JOB_ID': JOB_ID,
          'SLURM_JOB_NUM_NODES': '2', **env}


def _run(tmp_path, env, background=False):
  command = ['bash', SCRIPT, '--config=c.py', '--workdir=w']
  full_env = _fake_slurm(tmp_path, env)
  if background:
    return subprocess.Popen(command, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
  return subprocess.run(command, env=full_env, capture_output=True, text=True,
                        timeout=60)


def _scontrol_calls(tmp_path) -> list[str]:
  path = tmp_path / 'scontrol_args'
  return path.read_text().splitlines() if path.exists() else []


def test_script_parses_and_hard_codes_no_node_count():
  subprocess.run(['bash', '-n', SCRIPT], check=True)
  with open(SCRIPT) as f:
    text = f.read()
  assert not re.search(r'--nodes[= ]+\d', text)
  assert 'sbatch --nodes=N' in text  # the usage comment


@pytest.mark.skipif(shutil.which('shellcheck') is None, reason='shellcheck not installed')
def test_script_passes_shellcheck():
  result = subprocess.run(['shellcheck', SCRIPT], capture_output=True, text=True)
  assert result.returncode == 0, result.stdout


def test_srun_spans_the_nodes_that_sbatch_was_given(tmp_path):
  result = _run(tmp_path, {'SLURM_JOB_NUM_NODES': '3'})
  assert result.returncode == 0, result.stderr
  args = (tmp_path / 'srun_args').read_text().split()
  assert '--nodes=3' in args
  # A process's exit 75 (stopped after a save) must not end the others.
  assert '--kill-on-bad-exit=0' in args
  assert args[-4:] == ['.venv/bin/python', 'main.py', '--config=c.py',
                       '--workdir=w']
  assert _scontrol_calls(tmp_path) == []


@pytest.mark.parametrize('tasks, cpus', [('1', '32'), ('8', '4')])
def test_srun_gets_the_jobs_tasks_per_node_and_cpus_per_task_again(tmp_path, tasks, cpus):
  """Both job shapes (one process per host, one per GPU); since SLURM 22.05
  a step does not inherit --cpus-per-task, and would decode on one CPU."""
  result = _run(tmp_path, {'SLURM_NTASKS_PER_NODE': tasks, 'SLURM_CPUS_PER_TASK': cpus})
  assert result.returncode == 0, result.stderr
  args = (tmp_path / 'srun_args').read_text().split()
  assert f'--ntasks-per-node={tasks}' in args
  assert f'--cpus-per-task={cpus}' in args


def test_outside_a_slurm_job_it_says_how_to_submit(tmp_path):
  result = _run(tmp_path, {'SLURM_JOB_NUM_NODES': ''})
  assert result.returncode == 2
  assert 'sbatch --nodes=N' in result.stderr
  assert not (tmp_path / 'srun_args').exists()


def test_a_step_that_stopped_after_a_save_requeues_the_job(tmp_path):
  result = _run(tmp_path, {'SRUN_EXIT': '75'})
  assert _scontrol_calls(tmp_path) == [f'requeue {JOB_ID}']
  # The job runs again from the checkpoint: this run did what it should.
  assert result.returncode == 0, result.stderr
  assert 'requeued' in result.stderr


def test_when_the_requeue_fails_the_script_exits_75_saying_so(tmp_path):
  result = _run(tmp_path, {'SRUN_EXIT': '75', 'SCONTROL_EXIT': '1'})
  assert _scontrol_calls(tmp_path) == [f'requeue {JOB_ID}']
  assert result.returncode == 75
  assert 'submit the same command again' in result.stderr


def test_a_failed_step_keeps_its_exit_code_and_is_not_requeued(tmp_path):
  result = _run(tmp_path, {'SRUN_EXIT': '1'})
  assert result.returncode == 1
  assert _scontrol_calls(tmp_path) == []


def test_term_to_the_batch_shell_reaches_the_step_whose_exit_75_requeues(tmp_path):
  """The time limit's --signal=B:TERM: the TERM goes to the step, the script
  waits for the step's own exit code (not wait's 143) and requeues."""
  script = _run(tmp_path, {'SRUN_STOPS_ON_TERM': '1'}, background=True)
  try:
    deadline = time.time() + 30
    while not (tmp_path / 'srun_started').exists():
      assert time.time() < deadline and script.poll() is None, script.stderr.read()
      time.sleep(0.02)
    script.send_signal(signal.SIGTERM)
    _, stderr = script.communicate(timeout=30)
  finally:
    script.kill()
  assert (tmp_path / 'srun_signals').read_text().split() == ['TERM']
  assert _scontrol_calls(tmp_path) == [f'requeue {JOB_ID}']
  assert script.returncode == 0, stderr
