"""Specification of scripts/slurm_train.sbatch: the node count comes from sbatch."""

import os
import re
import subprocess

from tests.helpers import REPO

SCRIPT = os.path.join(REPO, 'scripts', 'slurm_train.sbatch')


def test_script_parses_and_hard_codes_no_node_count():
  subprocess.run(['bash', '-n', SCRIPT], check=True)
  with open(SCRIPT) as f:
    text = f.read()
  assert not re.search(r'--nodes[= ]+\d', text)
  assert 'sbatch --nodes=N' in text  # the usage comment


def _run_with_fake_srun(tmp_path, env):
  # An `srun` that records its arguments: the script's own logic, no SLURM.
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  srun = bin_dir / 'srun'
  srun.write_text('#!/bin/bash\necho "$@" > "$SRUN_ARGS"\n')
  srun.chmod(0o755)
  full_env = {'PATH': f'{bin_dir}:{os.environ["PATH"]}',
              'SRUN_ARGS': str(tmp_path / 'args'),
              'SLURM_SUBMIT_DIR': str(tmp_path), **env}
  return subprocess.run(['bash', SCRIPT, '--config=c.py', '--workdir=w'],
                        env=full_env, capture_output=True, text=True,
                        timeout=60)


def test_srun_spans_the_nodes_that_sbatch_was_given(tmp_path):
  result = _run_with_fake_srun(tmp_path, {'SLURM_JOB_NUM_NODES': '3'})
  assert result.returncode == 0, result.stderr
  args = (tmp_path / 'args').read_text().split()
  assert '--nodes=3' in args
  assert args[-4:] == ['.venv/bin/python', 'main.py', '--config=c.py',
                       '--workdir=w']


def test_outside_a_slurm_job_it_says_how_to_submit(tmp_path):
  result = _run_with_fake_srun(tmp_path, {})
  assert result.returncode == 2
  assert 'sbatch --nodes=N' in result.stderr
  assert not (tmp_path / 'args').exists()
