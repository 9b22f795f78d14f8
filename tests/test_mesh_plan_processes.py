"""A mesh plan from a probe of two processes, run as both (launch.py):
the same plan as in one process, its answers timed on both, one writer;
and the devices each process emulates for it."""

import json

import pytest

from cli import runtime
from core.errors import UsageError
from planner import from_probe
from planner import mesh_plan
from tests.helpers import run_main
from tests.helpers import xla_flags
from tests.test_launcher import launch
from tests.test_mesh_plan import _PLAN
from tests.test_mesh_plan import _probe


def test_each_process_of_a_job_emulates_its_share_of_the_planned_devices():
  provenance = {'device_count': 8, 'process_count': 2}
  assert from_probe.devices_to_emulate(provenance, 0, job_processes=2) == 4
  # One process plans the whole probed cluster, emulating all of it.
  assert from_probe.devices_to_emulate(provenance, 0, job_processes=1) == 8
  assert from_probe.devices_to_emulate({'device_count': 8}, 0, job_processes=1) == 8
  # plan.num_workers names the cluster, with or without a probe.
  assert from_probe.devices_to_emulate(None, 16, job_processes=4) == 4
  assert from_probe.devices_to_emulate(provenance, 16, job_processes=2) == 8
  assert from_probe.devices_to_emulate(None, 16, job_processes=1) == 16
  # Neither: every device at hand.
  assert from_probe.devices_to_emulate(None, 0, job_processes=3) == 0


@pytest.mark.parametrize('provenance,workers,message', [
    (None, 6, 'plan.num_workers=6 do not split over this job\'s 4 processes'),
    ({'device_count': 6}, 0, "the probe's 6 devices do not split over this job's 4 processes"),
])
def test_a_plan_whose_devices_do_not_split_over_the_processes_is_refused(
    provenance, workers, message):
  with pytest.raises(UsageError, match=message):
    from_probe.devices_to_emulate(provenance, workers, job_processes=4)


def test_the_job_s_processes_are_known_before_jax_starts():
  assert runtime.job_processes(3, environ={}) == 3
  assert runtime.job_processes(1, environ={}) == 1
  slurm = {'SLURM_JOB_ID': '7', 'SLURM_STEP_NODELIST': 'n[0-1]', 'SLURM_PROCID': '1',
           'SLURM_LOCALID': '1', 'SLURM_NTASKS': '4'}
  assert runtime.job_processes(1, environ=slurm) == 4
  assert runtime.job_processes(1, cluster='none', environ=slurm) == 1
  ompi = {'OMPI_MCA_orte_hnp_uri': 'x', 'OMPI_COMM_WORLD_RANK': '0', 'OMPI_COMM_WORLD_SIZE': '2'}
  assert runtime.job_processes(1, environ=ompi) == 2


def test_a_mesh_plan_for_more_workers_in_a_job_of_processes_that_do_not_divide_exits_2(
    tmp_path):
  """Checked before JAX starts: each process would emulate a share."""
  env = {'SLURM_JOB_ID': '7', 'SLURM_STEP_NODELIST': 'n0', 'SLURM_PROCID': '0',
         'SLURM_LOCALID': '0', 'SLURM_NTASKS': '3'}
  result = run_main('--config=configs/quickstart.py', f'--workdir={tmp_path / "w"}',
                    '--mode=plan', '--config.plan.parallelism=mesh',
                    '--config.plan.num_workers=8', '--config.plan.device_tflops=100',
                    env=env, timeout=120)
  assert result.returncode == 2, result.stderr[-2000:]
  assert "plan.num_workers=8 do not split over this job's 3 processes" in result.stderr


def test_a_plan_from_a_probe_of_two_processes_runs_as_both_and_times_there(tmp_path):
  """The same plan in one process of 4 emulated devices and as the probe's
  two processes of 2 (launch.py), which also time the answered meshes
  there; process 0 alone writes and speaks."""
  probe = _probe(devices=4, per_host=2)
  probe['provenance']['process_count'] = 2
  (tmp_path / 'probe').mkdir()
  (tmp_path / 'probe' / 'probe.json').write_text(json.dumps(probe))
  flags = [a for a in _PLAN if not a.startswith(('--config.plan.device_tflops',
                                                 '--config.plan.devices_per_host'))]
  flags.append(f'--config.plan.probe={tmp_path / "probe"}')
  one = run_main(f'--workdir={tmp_path / "one"}', *flags, env={'XLA_FLAGS': xla_flags(4)})
  assert one.returncode == 0, one.stderr[-3000:]
  # The job's work dir holds half of those compiles (a plan re-run there
  # reuses what the same devices compiled before); the two processes
  # compile the other half, and their costs must match one process's.
  with open(tmp_path / 'one' / mesh_plan.COMPILES_FILE) as f:
    compiled_in_one = f.readlines()
  seeded = compiled_in_one[:len(compiled_in_one) // 2]
  (tmp_path / 'both').mkdir()
  (tmp_path / 'both' / mesh_plan.COMPILES_FILE).write_text(''.join(seeded))
  both = launch(f'--workdir={tmp_path / "both"}', *flags, '--config.plan.time_steps=2',
                devices=2)
  assert both.returncode == 0, both.stderr[-3000:]
  plans = {}
  for name in ('one', 'both'):
    with open(tmp_path / name / 'plan.json') as f:
      plans[name] = json.load(f)
  costed = lambda plan: [(r['name'], r['peak']) for r in plan['fitting']]
  assert costed(plans['both']) == costed(plans['one'])
  assert [r['step_s'] for r in plans['both']['fitting']] == pytest.approx(
      [r['step_s'] for r in plans['one']['fitting']], rel=1e-9)
  timed = plans['both']['timed']
  assert list(timed) == [r['name'] for r in plans['both']['fitting'][:3]]
  assert plans['both']['timed_best'] == min(timed, key=lambda n: timed[n]['step_s'])
  assert both.stdout.count('fastest when timed: ') == 1
  assert '[p0] fastest when timed: ' in both.stdout
  assert plans['both']['compiles'] == {'compiled': len(compiled_in_one) - len(seeded),
                                       'reused': len(seeded)}
  with open(tmp_path / 'both' / mesh_plan.COMPILES_FILE) as f:
    assert len(f.readlines()) == len(compiled_in_one)  # one writer appended


def test_processes_that_answered_differently_are_refused_before_timing():
  same = ['data=4', 'fsdp=4', 'data=2 x tensor=2']
  mesh_plan.check_same_answers([same, list(same)])
  mesh_plan.check_same_answers([same])
  with pytest.raises(UsageError, match=r"plan.time_steps: the processes answered .*'fsdp=4'.*"
                                       r"'tensor=4'.*, not the same three"):
    mesh_plan.check_same_answers([same, ['data=4', 'tensor=4', 'data=2 x tensor=2']])
