"""Every bad flag or config value: exit 2, one line naming the key, no traceback,
and an existing work dir left exactly as it was."""

import math
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, run_main, run_main_many
from tests.test_end_to_end import tiny_synthetic_run_flags

QUICK = '--config=configs/quickstart.py'

# (arguments after --workdir, a fragment the one-line error must contain)
BAD_INVOCATIONS = [
    ([QUICK, '--config.no_such_key=1'], 'no_such_key'),
    ([QUICK, '--config.model.nam=resnet18'], 'model.nam'),
    ([QUICK, '--config.batch_size=abc'], 'batch_size'),
    ([QUICK, '--config.batch_size=12.5'], 'batch_size'),
    ([QUICK, '--config.model.name=resnet7'], 'model.name'),
    ([QUICK, '--config.data.source=imagenette'], 'data.source'),
    ([QUICK, '--config.learning_rate=-0.1'], 'learning_rate'),
    ([QUICK, '--config.batch_size=0'], 'batch_size'),
    ([QUICK, '--config.batch_size=12'], 'batch_size'),  # 8 data-parallel devices
    ([QUICK, '--config.mesh.data=3'], 'mesh'),
    ([QUICK, '--config.mesh.data=-1', '--config.mesh.fsdp=-1'], 'mesh'),
    ([QUICK, '--config.mesh.tensor=0'], 'mesh.tensor'),
    ([QUICK, '--config.model.dtype=float8'], 'model.dtype'),
    ([QUICK, '--config.optimizer=lion'], 'optimizer'),
    ([QUICK, '--config.label_smoothing=1.5'], 'label_smoothing'),
    ([QUICK, '--config.checkpoint.keep=0'], 'checkpoint.keep'),
    ([QUICK, '--config.num_train_steps=-5'], 'num_train_steps'),
    ([QUICK, '--config.nesterov=maybe'], 'nesterov'),
    (['--config=configs/folder.py', '--config.data.dir=/nonexistent/images'],
     '/nonexistent/images'),
    (['--config=configs/no_such_recipe.py'], 'no_such_recipe.py'),
    ([QUICK, '--mode=serve'], 'mode'),
    ([QUICK, '--no_such_flag=1'], 'no_such_flag'),
    ([QUICK, '--config.sharding_rules=((\'embed\', \'model\'),)'], 'sharding_rules'),
    ([QUICK, '--config.runtime.agree_every_steps=0'], 'runtime.agree_every_steps'),
    ([QUICK, '--config.runtime.cluster=slurm'], 'runtime.cluster=slurm'),  # no SLURM job
    # Evaluation data and checkpoint (shapes data: splits train and val only).
    ([QUICK, '--config.eval.dataset=imagenet_v2'], 'eval.dataset'),
    ([QUICK, '--config.eval.split=test'], 'eval.split'),
    ([QUICK, '--config.data.source=synthetic', '--config.eval.split=val'],
     "data.source='synthetic'"),
    ([QUICK, '--config.eval.checkpoint=newest'], 'eval.checkpoint'),
    # The parameter-server engine (synthetic data: no data set to generate).
    ([QUICK, '--config.data.source=synthetic', '--config.engine=ps',
      '--config.ps.partitioner=round_robin', '--config.ps.num_shards=1000'],
     'ps.num_shards=1000'),
    # Refused before anything is allocated per shard (it once grew past
    # 16 GiB).
    ([QUICK, '--config.data.source=synthetic', '--config.engine=ps',
      '--config.ps.num_shards=1000000000'], 'ps.num_shards=1000000000'),
    ([QUICK, '--config.engine=ps', '--config.ps.mode=async',
      '--config.ps.max_staleness=-2'], 'ps.max_staleness'),
    ([QUICK, '--config.engine=ps', '--config.ps.max_staleness=2'], 'ps.max_staleness'),
    ([QUICK, '--config.engine=ps', '--config.network.bandwidth_gbps=-1'], 'network.bandwidth_gbps'),
    ([QUICK, '--config.engine=ps', '--config.mesh.fsdp=2'], 'engine=ps'),
    ([QUICK, '--config.engine=ps', '--config.mesh.shard_update=true'], 'mesh.shard_update'),
    ([QUICK, '--config.data.source=synthetic', '--config.engine=ps',
      '--config.ps.overlap=true'], 'network.num_workers'),  # 8 of 8 CPU devices
    ([QUICK, '--config.engine=ps', '--config.model.bn_group_size=32'],
     'model.bn_group_size'),  # groups would span the 8 workers' slices of 16
    # Values that once ended in a traceback.
    ([QUICK, '--config.sharding_rules=(1,2)'], 'sharding_rules'),
    ([QUICK, '--config.num_epochs=1e999'], 'num_epochs'),
    ([QUICK, '--config.num_epochs=nan'], 'num_epochs'),
    ([QUICK, '--config.seed=-1'], 'seed=-1'),
    ([QUICK, '--config.model.name=vit_b16', '--config.data.image_size=33'],
     'data.image_size=33'),
    ([QUICK, '--config.model.name=vit_b16', '--config.model.width=200'],
     'model.width=200'),
    ([QUICK, '--config.eval.checkpoint=²'], 'eval.checkpoint'),
    ([QUICK, '--config.plan.host_cores=-2'], 'plan.host_cores=-2'),
    ([QUICK, '--config.plan.host_cpu_ms_per_image=0'], 'plan.host_cpu_ms_per_image'),
]


def _snapshot(directory):
  return {name: os.path.getmtime(os.path.join(directory, name))
          for name in os.listdir(directory)}


@pytest.fixture(scope='module')
def bad_invocations(tmp_path_factory):
  """Each of BAD_INVOCATIONS run in a work dir holding a file of the
  user's: (its result, the work dir's files before, after)."""
  root = tmp_path_factory.mktemp('bad_invocations')
  workdirs = []
  for number in range(len(BAD_INVOCATIONS)):
    workdir = root / str(number)
    workdir.mkdir()
    (workdir / 'keep.txt').write_text('user data')
    workdirs.append((workdir, _snapshot(workdir)))
  results = run_main_many([[f'--workdir={w}', *args]
                           for (w, _), (args, _) in zip(workdirs, BAD_INVOCATIONS)])
  return [(result, before, _snapshot(w), w) for result, (w, before) in zip(results, workdirs)]


@pytest.mark.parametrize('number', range(len(BAD_INVOCATIONS)),
                         ids=[a[-1] for a, _ in BAD_INVOCATIONS])
def test_bad_invocation_exits_2_with_one_line_naming_the_key(bad_invocations, number):
  result, before, after, _ = bad_invocations[number]
  fragment = BAD_INVOCATIONS[number][1]
  assert result.returncode == 2, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert fragment in lines[0]
  assert 'Traceback' not in result.stderr
  assert after == before


def test_a_batched_invocation_is_the_command_line_run_alone(tmp_path, bad_invocations):
  """tests/main_batch.py's forked children answer as main.py run on its own."""
  number = next(i for i, (args, _) in enumerate(BAD_INVOCATIONS)
                if args[-1] == '--config.batch_size=12')  # needs the devices started
  args = BAD_INVOCATIONS[number][0]
  batched, _, _, batched_workdir = bad_invocations[number]
  workdir = tmp_path / 'run'
  alone = run_main(f'--workdir={workdir}', *args, timeout=120)
  assert (alone.returncode, alone.stdout) == (batched.returncode, batched.stdout)
  assert alone.stderr.replace(str(workdir), 'W') == batched.stderr.replace(str(batched_workdir), 'W')


def _recipe(tmp_path, body):
  path = tmp_path / 'recipe.py'
  path.write_text(body)
  return path


# (what to put where, a fragment the one-line error must contain)
BAD_FILES = {
    'a config.json as the recipe': (
        lambda tmp: ('--config', tmp / 'saved' / 'config.json'), 'config.json'),
    'a recipe whose get_config raises': (
        lambda tmp: ('--config', _recipe(tmp, 'def get_config():\n  return 1 / 0\n')),
        'ZeroDivisionError'),
    'a recipe whose get_config returns None': (
        lambda tmp: ('--config', _recipe(tmp, 'def get_config():\n  return None\n')),
        'returned NoneType'),
    'a recipe whose get_config returns a dict': (
        lambda tmp: ('--config', _recipe(tmp, 'def get_config():\n  return {}\n')),
        'returned dict'),
    'a saved config.json holding a list': (
        lambda tmp: ('config.json', b'[]'), 'JSON array'),
    'a saved config.json that is not UTF-8': (
        lambda tmp: ('config.json', b'{"seed": "\xff"}'), 'utf-8'),
}


@pytest.fixture(scope='module')
def bad_files(tmp_path_factory):
  """Each case of BAD_FILES: (its result, the file named, the work dir's
  files before, after)."""
  cases = []
  for case, (make, _) in BAD_FILES.items():
    root = tmp_path_factory.mktemp('bad_file')
    (root / 'saved').mkdir()
    (root / 'saved' / 'config.json').write_text('{}')
    workdir = root / 'run'
    workdir.mkdir()
    what, content = make(root)
    if what == '--config':
      args, named = [f'--config={content}'], str(content)
    else:  # the work dir's own config.json
      (workdir / what).write_bytes(content)
      args, named = [], str(workdir / what)
    cases.append((case, workdir, [f'--workdir={workdir}', *args], named, _snapshot(workdir)))
  results = run_main_many([args for _, _, args, _, _ in cases])
  return {case: (result, named, before, _snapshot(workdir))
          for (case, workdir, _, named, before), result in zip(cases, results)}


@pytest.mark.parametrize('case', BAD_FILES)
def test_a_bad_recipe_or_saved_config_exits_2_with_one_line_naming_the_file(bad_files, case):
  result, named, before, after = bad_files[case]
  fragment = BAD_FILES[case][1]
  assert result.returncode == 2, result.stderr
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert named in lines[0] and fragment in lines[0]
  assert after == before


def test_missing_workdir_flag_exits_2():
  result = run_main(QUICK, timeout=120)
  assert result.returncode == 2
  assert '--workdir' in result.stderr.strip()


def test_a_folder_with_one_class_exits_2_naming_it(tmp_path):
  """One class trains a classifier that is always right, and learns nothing."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split in ('train', 'val'):
    os.makedirs(tmp_path / 'data' / split / 'ant')
    for i in range(4):
      Image.new('RGB', (8, 8), (i, 0, 0)).save(tmp_path / 'data' / split / 'ant' / f'{i}.png')
  result = run_main('--config=configs/folder.py', f'--workdir={tmp_path / "run"}',
                    f'--config.data.dir={tmp_path / "data"}', '--config.batch_size=8',
                    timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert lines[-1] == (f'error: data.dir={tmp_path / "data"}: the data has one class; a '
                       'classifier needs at least two (one sub-folder of images per class)')
  assert not (tmp_path / 'run' / 'checkpoints').exists()


def test_eval_of_an_empty_workdir_exits_2(tmp_path):
  result = run_main(f'--workdir={tmp_path}', '--mode=eval', timeout=120)
  assert result.returncode == 2
  assert 'train first' in result.stderr


def test_a_step_that_does_not_fit_device_memory_stops_before_writing(tmp_path):
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(),
                    '--config.runtime.device_memory_gib=0.0001', timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'does not fit' in error and 'GiB short' in error and 'mesh.fsdp' in error
  assert not workdir.exists()


def _image_size_whose_step_cannot_fit_the_host() -> int:
  """A quickstart image size whose host batches fit this machine's memory
  with room to spare but whose compiled train step does not: one host batch
  of an eighth of the memory (the batches held at once take half of it),
  while the step's activations are about 16 batches' worth of bytes."""
  from trainer import memory  # pylint: disable=g-import-not-at-top
  batch_bytes = memory.read_host_memory_limit() / 8
  side = math.sqrt(batch_bytes / (128 * memory.DECODED_BYTES_PER_PIXEL))
  return int(side) // 32 * 32


def test_a_step_that_does_not_fit_the_host_memory_stops_before_writing(tmp_path, shapes_dir):
  # On a CPU the limit is the host memory the process can use, shared by
  # its 8 emulated devices; nothing sets runtime.device_memory_gib.
  workdir = tmp_path / 'run'
  size = _image_size_whose_step_cannot_fit_the_host()
  result = run_main('--config=configs/quickstart.py', f'--workdir={workdir}',
                    f'--config.data.dir={shapes_dir}', f'--config.data.image_size={size}',
                    timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith('error: the train step does not fit: it needs about '), error
  assert 'GiB for 8 devices) but this process can use' in error
  assert 'GiB of host memory, shared by its 8 CPU devices' in error
  assert 'data.image_size' in error and 'batch_size' in error
  assert not workdir.exists()


def test_host_batches_larger_than_the_host_memory_stop_before_compiling(tmp_path):
  # The typo: 100000 px images on the quickstart recipe.
  workdir = tmp_path / 'run'
  result = run_main('--config=configs/quickstart.py', f'--workdir={workdir}',
                    '--config.data.image_size=100000', timeout=120)
  assert result.returncode == 2, result.stderr[-2000:]
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith('error: the host batches do not fit: batch_size=128 of '
                          'data.image_size=100000 px images'), error
  assert 'need 57220.46 GiB' in error and 'GiB available' in error
  assert 'Compiled' not in result.stderr
  assert not workdir.exists()


# Runs the rest of its command line as a program that obeys file permissions
# even as root (CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH leave the bounding
# set, so the exec'd program lacks them); others obey them anyway. A launcher
# rather than preexec_fn, which is unsafe in a process with threads (JAX's).
_OBEY_PERMISSIONS = """
import ctypes, os, sys
if os.geteuid() == 0:
  libc = ctypes.CDLL(None, use_errno=True)
  for capability in (1, 2):
    if libc.prctl(24, capability, 0, 0, 0):  # PR_CAPBSET_DROP
      raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


def _unusable_workdir(tmp_path, kind):
  if kind == 'a file':
    (tmp_path / 'run').write_text('user data')
    return tmp_path / 'run', 'is not a directory'
  if kind == 'under a file':
    (tmp_path / 'notes').write_text('user data')
    return tmp_path / 'notes' / 'run', 'cannot be created'
  (tmp_path / 'locked').mkdir()
  (tmp_path / 'locked').chmod(0o500)
  if kind == 'in a read-only dir':
    return tmp_path / 'locked' / 'run', 'cannot be created'
  return tmp_path / 'locked', 'cannot be written'  # a read-only dir itself


@pytest.mark.parametrize('kind', ['a file', 'under a file', 'in a read-only dir',
                                  'a read-only dir'])
@pytest.mark.parametrize('mode', ['train', 'eval'])
def test_an_unusable_workdir_exits_2_with_one_line_before_any_work(tmp_path, kind, mode):
  workdir, fragment = _unusable_workdir(tmp_path, kind)
  before = sorted(str(p) for p in tmp_path.rglob('*'))
  result = subprocess.run(
      [sys.executable, '-c', _OBEY_PERMISSIONS, 'main.py', f'--workdir={workdir}',
       f'--mode={mode}', QUICK], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(f'error: --workdir={workdir}: ') and fragment in lines[0]
  assert sorted(str(p) for p in tmp_path.rglob('*')) == before


def test_keys_of_other_engines_are_named_as_ignored():
  # pylint: disable=g-import-not-at-top
  from configs import default
  from cli import validation
  # pylint: enable=g-import-not-at-top
  config = default.get_config()
  assert validation.ignored_engine_keys(config) == []
  config.ps.num_shards, config.ps.overlap = 2, True
  assert validation.ignored_engine_keys(config) == ['ps.num_shards', 'ps.overlap']
  config.engine = 'ps'
  assert validation.ignored_engine_keys(config) == []
  config.network.bandwidth_gbps, config.allreduce.algorithm = 1.0, 'other'
  assert validation.ignored_engine_keys(config) == ['allreduce.algorithm']
  config.engine = 'allreduce'
  assert validation.ignored_engine_keys(config) == ['ps.num_shards', 'ps.overlap']
