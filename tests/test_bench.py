"""--mode=bench: one JSON line, appended to bench.jsonl; bad input exits 2."""

import glob
import json
import os

from cli import runtime
from tests.helpers import run_main, xla_flags
from tests.test_end_to_end import tiny_synthetic_run_flags

_TINY = ('--config.model.name=resnet18', '--config.model.width=8',
         '--config.data.image_size=32', '--config.batch_size=16',
         '--config.bench.steps=3', '--config.bench.warmup_steps=1')


def test_bench_reports_and_appends_on_synthetic_and_real_data(tmp_path, monkeypatch):
  workdir = str(tmp_path / 'bench')
  _jpeg_folder(tmp_path / 'images')
  monkeypatch.delenv('GLIBC_TUNABLES', raising=False)
  records = []
  # 2 devices, not 8: a bench times a matmul on every device 22 times for the
  # peak (trainer/mfu.py), which on 8 emulated devices took a quarter of a
  # run's CPU here, 5 s more than on 2. Nothing checked here depends on the
  # count but the mesh.
  two_devices = {'XLA_FLAGS': xla_flags(2)}
  # The second run also keeps glibc's malloc defaults (an empty setting) and
  # reads the folder of JPEGs (of 2 classes, as the synthetic data here).
  real = ('--config.bench.data=real', '--config.data.source=folder',
          f'--config.data.dir={tmp_path / "images"}', '--config.data.augment=inception_crop')
  # The first run also traces one step, as training does.
  for xnnpack, env, data in (('true', {}, ('--config.profile_steps=2,3',)),
                             ('false', {'GLIBC_TUNABLES': ''}, real)):
    result = run_main(f'--workdir={workdir}', '--mode=bench', *_TINY,
                      '--config.model.num_classes=2',
                      f'--config.runtime.cpu_xnnpack={xnnpack}', *data,
                      env={**two_devices, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'bench: warmed up; timing' in result.stderr  # progress between compile and result
    records.append(json.loads(result.stdout.strip().splitlines()[-1]))
  record = records[0]
  traces = [name for _, _, names in os.walk(os.path.join(workdir, 'profile'))
            for name in names if name.endswith('.xplane.pb')]
  assert len(traces) == 1 and record['profile_steps'] == '2,3'
  assert [name for name, _ in _step_markers(workdir)] == ['train']
  assert records[1]['profile_steps'] == ''
  assert record['model'] == 'resnet18' and record['depth'] == 0 and record['batch_size'] == 16
  assert record['mesh'] == {'data': 2, 'fsdp': 1, 'tensor': 1}
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
  # Synthetic data: the step alone, no word about the host's cores.
  assert record['data_source'] == 'synthetic' and 'host_input' not in record
  _check_host_input(records[1], result.stderr)
  with open(os.path.join(workdir, 'bench.jsonl')) as f:
    lines = [json.loads(line) for line in f]
  assert lines == records
  # Nothing else but the trace asked for: the work dir is not made a training run's.
  assert sorted(os.listdir(workdir)) == ['bench.jsonl', 'profile']


def _check_host_input(record, log):
  """The input pipeline's figures, and the verdict that follows from them."""
  assert record['data_source'] == 'folder'
  assert record['input_images_per_sec'] > 0
  cpu_ms = record['input_cpu_ms_per_image']
  assert record['input_images_per_sec_per_core'] == round(1000 / cpu_ms, 1)
  assert record['host_cores'] == len(os.sched_getaffinity(0))
  supply = record['host_cores'] * 1000 / cpu_ms
  assert record['input_bound'] == (supply < record['images_per_sec'])
  assert record['host_cores_needed'] >= 1
  cores = lambda n: f'{n} core{"s" if n != 1 else ""}'
  if record['input_bound']:
    assert f"input-bound: the host's {cores(record['host_cores'])}" in record['host_input']
    assert f"feeding them takes {cores(record['host_cores_needed'])}" in record['host_input']
  else:
    assert f"the host's {cores(record['host_cores'])} keep up" in record['host_input']
    assert f"({cores(record['host_cores_needed'])} busy)" in record['host_input']
  assert record['host_input'] in log  # said in words in the log


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
  assert _step_markers(workdir) == [('train', 2)]


def _step_markers(workdir) -> list[tuple[str, int]]:
  """(name, step_num) of every step marker (the event with a step_num
  stat, which the profiler's step view reads) in the work dir's trace,
  parsed with the profiler's own XSpace protocol buffer."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  markers = []
  for path in glob.glob(os.path.join(workdir, 'profile', '**', '*.xplane.pb'), recursive=True):
    space = xplane_pb2.XSpace()
    with open(path, 'rb') as f:
      space.ParseFromString(f.read())
    for plane in space.planes:
      stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
      for line in plane.lines:
        for event in line.events:
          steps = [s.int64_value or s.uint64_value for s in event.stats
                   if stat_names.get(s.metadata_id) == 'step_num']
          if steps:
            markers.append((plane.event_metadata[event.metadata_id].name, steps[0]))
  return markers


def _jpeg_folder(root, classes=2, per_class=8, size=48) -> None:
  """train/ and val/ class folders of small noisy JPEGs."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for split in ('train', 'val'):
    for c in range(classes):
      os.makedirs(root / split / f'c{c}')
      for i in range(per_class):
        pixels = rng.integers(0, 256, (size, size + 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / split / f'c{c}' / f'{i}.jpg', quality=90)


def test_bench_on_real_data_bad_input_exits_2(tmp_path):
  for flags, words in (
      (('--config.bench.data=files',), 'bench.data'),
      (('--config.bench.data=real', '--config.data.source=synthetic'), 'data.source'),
      (('--config.bench.data=real', '--config.data.source=folder',
        f'--config.data.dir={tmp_path}/absent'), 'absent')):
    result = run_main(f'--workdir={tmp_path}/w', '--mode=bench', *_TINY, *flags)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2, (flags, result.stderr[-2000:])
    assert last.startswith('error: ') and words in last, (flags, last)
    assert not os.path.exists(f'{tmp_path}/w')
