"""A mesh plan from a probe of two processes, run as both (launch.py):
the same plan as in one process, its answers timed on both, one writer;
and the devices each process emulates for it."""

import json

import pytest

from planner import from_probe
from planner import mesh_plan
from tests.helpers import run_main
from tests.helpers import xla_flags
from tests.test_launcher import launch
from tests.test_mesh_plan import _PLAN
from tests.test_mesh_plan import _probe


def test_each_process_of_a_job_emulates_its_share_of_the_probed_devices():
  provenance = {'device_count': 8, 'process_count': 2}
  assert from_probe.devices_to_emulate(provenance, multi_process_job=True) == 4
  # One process plans the whole probed cluster, emulating all of it.
  assert from_probe.devices_to_emulate(provenance, multi_process_job=False) == 8
  assert from_probe.devices_to_emulate({'device_count': 8}, multi_process_job=False) == 8


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
  with open(tmp_path / 'both' / mesh_plan.COMPILES_FILE) as f:
    assert len(f.readlines()) == plans['both']['compiles']['compiled']  # one writer
