"""--mode=plan and --mode=study from the command line: outputs, resume, errors."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_main, run_main_many

TINY = ['--config=configs/quickstart.py', '--config.model.width=4',
        '--config.data.image_size=16', '--config.plan.repeats=1']
HERE = '--config.plan.target=here'  # plans of the devices at hand must say so


def test_plan_recommends_and_writes_plan_json_and_plots(tmp_path):
  workdir = tmp_path / 'plan'
  # A hypothetical cluster of 4 hosts of 4 devices on 10 Gbit/s NICs, given
  # by the devices' peak: T_C at each batch is its FLOPs (XLA's count for
  # the program compiled here) at that peak and utilisation.
  result = run_main(f'--workdir={workdir}', '--mode=plan', *TINY,
                    '--config.network.num_workers=2', '--config.plan.per_worker_batch_sizes=2,4',
                    '--config.plan.num_workers=16', '--config.plan.devices_per_host=4',
                    '--config.plan.link_bandwidth_gbps=10', '--config.plan.intra_host_gbps=100',
                    '--config.plan.device_tflops=100',
                    '--config.plan.device_utilization=0.5')
  assert result.returncode == 0, result.stderr[-3000:]
  plan = json.loads((workdir / 'plan.json').read_text())
  assert plan['recommended']['per_worker_batch'] in (2, 4)
  assert 1 <= plan['recommended']['num_shards'] <= 16  # never more shards than workers
  # A tiny model on a 100 TFLOP/s device computes in microseconds: its
  # bytes outlast that on 10 Gbit/s at every batch tried, and the plan
  # says so: grow the batch, by about how much, and what limits it.
  rec = plan['recommended']
  assert rec['link_bound'] is True and rec['bandwidth_to_hide_gbps'] > 10
  assert rec['per_worker_batch'] == 4  # the larger batch amortises the communication
  assert rec['no_batch_scales'] is True and rec['batch_to_scale'] > 4
  assert rec['strategy'] in ('ring', 'hierarchical', 'ps')
  assert rec['max_hosts_that_scale'] in (0, 1)
  assert 'the link, not the number of shards, limits PS here' in result.stdout
  for answer in ('per-device batch: 4', 'use: ', 'no per-device batch tried'):
    assert answer in result.stdout
  assert plan['answers'] and all(line in result.stdout for line in plan['answers'])
  assert plan['cluster']['num_hosts'] == 4 and plan['cluster']['devices_per_host'] == 4
  assert {'ring', 'hierarchical', 'ps'} <= set(plan['predicted_by_hosts'][0])
  sweep = plan['compute_sweep']
  assert [p['per_worker_batch'] for p in sweep] == [2, 4]
  assert all(p['compute_s'] > 0 and p['flops'] > 0 for p in sweep)
  assert sweep[1]['flops'] > sweep[0]['flops']  # twice the examples
  assert plan['cluster']['num_workers'] == 16
  chosen = next(p for p in sweep
                if p['per_worker_batch'] == plan['recommended']['per_worker_batch'])
  assert plan['cluster']['compute_s'] == pytest.approx(chosen['flops'] / (100e12 * 0.5))
  assert 'TFLOP/s' in plan['cluster']['compute_s_source']
  assert (workdir / 'plan.png').exists()
  assert 'PS shards for 16 devices (4 hosts of 4 devices)' in result.stdout


def test_a_study_resumes_without_redoing_cells_and_runs_both_engines(tmp_path, monkeypatch):
  workdir = tmp_path / 'study'
  monkeypatch.delenv('GLIBC_TUNABLES', raising=False)  # main.py decides
  # batch_size=100 divides neither the 8 devices nor the 2 workers: the
  # study sets each cell's batch itself, so the run's own must not block it.
  grid = [*TINY, '--config.batch_size=100', '--config.study.models=resnet18',
          '--config.study.model_width=4',
          '--config.study.num_workers=2', '--config.study.global_batch_sizes=8',
          '--config.study.link_bandwidths_gbps=1', '--config.study.steps=1',
          '--config.study.engines=ps']
  result = run_main(f'--workdir={workdir}', '--mode=study', *grid,
                    '--config.study.num_shards=1')
  assert result.returncode == 0, result.stderr[-3000:]
  first = (workdir / 'study.jsonl').read_text().splitlines()
  assert len(first) == 1

  # A larger grid in the same work dir, all-reduce too: the finished cell
  # is kept as it was.
  result = run_main(f'--workdir={workdir}', '--mode=study', *grid,
                    '--config.study.num_shards=1,2', '--config.study.engines=ps,allreduce')
  assert result.returncode == 0, result.stderr[-3000:]
  rows = (workdir / 'study.jsonl').read_text().splitlines()
  assert len(rows) == 3 and rows[0] == first[0]
  assert '1 done before, 2 to run' in result.stderr
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary['cells'] == 3 and summary['mape_percent'] >= 0
  assert summary['link_bound_cells'] + summary['compute_bound_cells'] == 3
  rows = [json.loads(r) for r in rows]
  assert [r['cell']['engine'] for r in rows] == ['ps', 'ps', 'allreduce']
  # A study runs on glibc's malloc defaults (cli/runtime.py), and says so.
  assert all(r['glibc_tunables'] == '' for r in rows)
  assert all(r['step_kernel_cpu_s'] >= 0 and len(r['steps_s']) == 1 for r in rows)
  assert all(r['overhead_s_planned'] > 0 for r in rows[:2])
  # The all-reduce cell: its ring measured and predicted from the planner's
  # own host timings.
  assert rows[2]['allreduce_s'] > 0 and rows[2]['host_ring_s_planned'] > 0
  assert rows[2]['communication_s_planned'] > 0
  study_md = (workdir / 'study.md').read_text()
  assert 'mean absolute percentage error' in study_md and '## Findings' in study_md
  for png in ('study_step_time_vs_shards.png', 'study_throughput_vs_workers.png',
              'study_predicted_vs_measured.png'):
    assert os.path.exists(workdir / png)


# (arguments, a fragment of the last line)
BAD_INPUTS = [
    (['--mode=study', '--config.study.num_shards='], 'study.num_shards'),
    (['--mode=study', '--config.study.link_bandwidths_gbps=0'], 'study.link_bandwidths_gbps'),
    (['--mode=study', '--config.study.engines=ps,spmd'], 'study.engines'),
    (['--mode=plan', '--config.plan.link_bandwidth_gbps=-1'], 'plan.link_bandwidth_gbps'),
    (['--mode=plan', '--config.plan.device_utilization=1.5'], 'plan.device_utilization'),
    (['--mode=plan', '--config.plan.num_workers=16', '--config.plan.devices_per_host=3'],
     'plan.devices_per_host'),
    (['--mode=plan', '--config.plan.ps_placement=nearby'], 'plan.ps_placement'),
    (['--mode=plan', HERE, '--config.runtime.device_memory_gib=0.000001',
      '--config.plan.per_worker_batch_sizes=2'], 'fits'),
    (['--mode=plan'], 'or plan.target=here'),
    (['--mode=plan', HERE, '--config.plan.device_tflops=100'], 'plan.target=here times'),
    (['--mode=plan', '--config.plan.compute_s=0.1', '--config.plan.probe=runs/p'],
     'both give'),
    (['--mode=plan', '--config.plan.target=there'], 'plan.target'),
    (['--mode=plan', HERE, '--config.model.bn_group_size=128'], 'whole batch-norm groups'),
]
BAD_INPUT_IDS = ['empty grid', 'study bandwidth', 'study engine', 'plan bandwidth',
                 'utilization', 'hosts', 'placement', 'nothing fits', 'no device named',
                 'here and a peak', 'two sources', 'bad target', 'no batch of whole groups']


@pytest.fixture(scope='module')
def bad_input_results(tmp_path_factory):
  root = tmp_path_factory.mktemp('bad_inputs')
  return run_main_many([[f'--workdir={root / str(n)}', *TINY, *args]
                        for n, (args, _) in enumerate(BAD_INPUTS)])


@pytest.mark.parametrize('number', range(len(BAD_INPUTS)), ids=BAD_INPUT_IDS)
def test_bad_plan_or_study_input_exits_2_with_one_line(bad_input_results, number):
  result, fragment = bad_input_results[number], BAD_INPUTS[number][1]
  assert result.returncode == 2, result.stderr[-3000:]
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert fragment in lines[-1] and 'Traceback' not in result.stderr
  if fragment != 'fits':  # found before any work: the only line
    assert len(lines) == 1, result.stderr


@pytest.mark.parametrize('mode_args', [
    ['--mode=plan', '--config.plan.device_tflops=100'],
    ['--mode=study', '--config.study.models=resnet18'],
], ids=['plan', 'study'])
def test_a_measuring_plan_or_study_of_several_processes_exits_2_with_one_line(tmp_path, mode_args):
  # The planner's timers place emulated workers on devices one process
  # addresses; under launch.py every process refuses before its runtime
  # starts, writing nothing.
  workdir = tmp_path / 'run'
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, 'launch.py'), '--processes=2', '--devices=1', '--',
       f'--workdir={workdir}', *TINY, *mode_args],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  output = result.stdout + result.stderr
  assert 'Traceback' not in output
  refusal = 'measures on the devices of one process, and this job has 2'
  # A process says so in its own line before its runtime starts, so none
  # waits for a peer that has left; launch.py then stops the other one.
  assert re.search(r'^\[p[01]\] error: --mode=', output, re.M), output[-3000:]
  assert refusal in result.stderr.strip().splitlines()[-1]  # the launcher's last line
  assert not os.path.exists(workdir) or os.listdir(workdir) == []
