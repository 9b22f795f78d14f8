"""--mode=bench: one JSON line, appended to bench.jsonl; bad input exits 2."""

import json
import os

from cli import runtime
from tests.helpers import run_main
from tests.test_end_to_end import tiny_synthetic_run_flags

_TINY = ('--config.model.name=resnet18', '--config.model.width=8',
         '--config.data.image_size=32', '--config.batch_size=16',
         '--config.bench.steps=3', '--config.bench.warmup_steps=1')


def test_bench_reports_and_appends(tmp_path, monkeypatch):
  workdir = str(tmp_path / 'bench')
  monkeypatch.delenv('GLIBC_TUNABLES', raising=False)
  records = []
  # The second run also keeps glibc's malloc defaults (an empty setting).
  for xnnpack, env in (('true', {}), ('false', {'GLIBC_TUNABLES': ''})):
    result = run_main(f'--workdir={workdir}', '--mode=bench', *_TINY,
                      f'--config.runtime.cpu_xnnpack={xnnpack}', env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'bench: warmed up; timing' in result.stderr  # progress between compile and result
    records.append(json.loads(result.stdout.strip().splitlines()[-1]))
  record = records[0]
  assert record['model'] == 'resnet18' and record['depth'] == 0 and record['batch_size'] == 16
  assert record['mesh'] == {'data': 8, 'fsdp': 1, 'tensor': 1}
  assert record['conv_form'] == 'by_shape'  # auto on CPU
  assert record['shard_update'] is False
  assert record['images_per_sec'] > 0 and record['compile_s'] > 0
  assert record['step_time_p90_s'] >= record['step_time_median_s'] > 0
  assert record['model_gflops_per_image'] > 0 and record['peak_tflops'] > 0
  assert 0 < record['mfu'] < 1
  assert 0 <= record['input_wait_fraction'] < 1
  assert '--xla_cpu_use_xnnpack=true' in record['xla_flags']  # the default
  assert 'xnnpack' not in records[1]['xla_flags']
  # main.py restarts itself once with its malloc tunables, unless told otherwise.
  assert record['glibc_tunables'] == runtime.MALLOC_TUNABLES
  assert records[1]['glibc_tunables'] == ''
  # The FLOPs are XLA's count of the model, whatever kernels compute it.
  assert records[1]['model_gflops_per_image'] == record['model_gflops_per_image']
  with open(os.path.join(workdir, 'bench.jsonl')) as f:
    lines = [json.loads(line) for line in f]
  assert lines == records
  # Nothing else: the work dir is not made a training run's.
  assert sorted(os.listdir(workdir)) == ['bench.jsonl']


def test_bench_bad_input_exits_2(tmp_path):
  for flag, words in (('--config.bench.steps=0', 'bench.steps'),
                      ('--config.profile_steps=5,3', 'profile_steps'),
                      ('--config.model.conv_form=winograd', 'model.conv_form')):
    result = run_main(f'--workdir={tmp_path}/w', '--mode=bench', *_TINY, flag)
    assert result.returncode == 2, (flag, result.stderr[-2000:])
    assert result.stderr.strip().splitlines()[-1].startswith('error: ')
    assert words in result.stderr.strip().splitlines()[-1]
    assert not os.path.exists(f'{tmp_path}/w')


def test_training_logs_mfu_and_traces_chosen_steps(tmp_path):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      num_train_steps=4, log_every_steps=2, eval_every_steps=4, profile_steps='2,3'))
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    train = [json.loads(line) for line in f if '"train"' in line]
  assert [r['step'] for r in train] == [2, 4]
  assert all(0 < r['mfu'] < 1 for r in train)
  assert 'MFU ' in result.stderr
  traces = [name for _, _, names in os.walk(os.path.join(workdir, 'profile'))
            for name in names if name.endswith('.xplane.pb')]
  assert len(traces) == 1
  assert 'Traced steps 2..2' in result.stderr
