"""--mode=export (modes/export.py): a trained checkpoint as a TensorFlow
SavedModel that gives the trainer's evaluation logits; bad inputs; and the
code blocks of docs/export.md, run as written, so the page cannot rot."""

import json
import os
import re
import shutil
import types

import jax
import numpy as np
from PIL import Image
import pytest

from configs import schema
from core.errors import UsageError
from input_pipeline import single_images
from modes import eval as eval_mode
from modes import export
from tests.helpers import REPO, run_main
from tests.test_end_to_end import tiny_synthetic_run_flags
from trainer import checkpointing
from trainer import experiment
from trainer import step_functions
from trainer import tree_paths

STEPS = 2
NUM_CLASSES = 10
SIZE = 16  # tiny_run_flags' data.image_size
CLASS_NAMES = [f'class_{i}' for i in range(NUM_CLASSES)]
# float32 both sides; the SavedModel runs the same StableHLO through
# TensorFlow's XLA, the trainer through jax's, with other fusions.
ATOL = 1e-4


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """2 steps of a 4-wide ResNet-18 at 16 px with a moving average of the
  weights, and the classes.json that folder data's runs write."""
  workdir = str(tmp_path_factory.mktemp('export') / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_synthetic_run_flags(
      num_train_steps=STEPS, ema_decay=0.9))
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(workdir, experiment.CLASS_MAP_FILE_NAME), 'w') as f:
    json.dump({name: i for i, name in enumerate(CLASS_NAMES)}, f)
  return workdir


@pytest.fixture(scope='module')
def exported(trained):
  """--mode=export of the latest checkpoint's raw weights: its directory."""
  result = run_main(f'--workdir={trained}', '--mode=export')
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary == {'export_dir': os.path.join(trained, 'export', f'step_{STEPS}'),
                     'step': STEPS, 'weights': 'raw'}
  return summary['export_dir']


@pytest.fixture(scope='module')
def trainer_side(trained):
  """The trainer's restore of checkpoint STEPS (raw and EMA) and its
  evaluation forward pass (step_functions.eval_step's)."""
  config = schema.load_saved(trained)
  exp = experiment.build_without_data(config, NUM_CLASSES)
  directory = os.path.join(trained, checkpointing.LATEST_DIR)
  states = {}
  for weights in ('raw', 'ema'):
    config.eval.weights = weights
    states[weights] = eval_mode.restore_chosen_weights(config, directory, STEPS,
                                                      exp.abstract_state)
  forward = jax.jit(lambda variables, images: exp.model.apply(
      variables, step_functions.normalize_images(images), train=False))

  def logits(variables, images):
    with exp.tracing_context():
      return np.asarray(forward(variables, images))

  def eval_logits(weights, images):
    state = states[weights]
    return logits({'params': state.params, 'batch_stats': state.batch_stats}, images)

  return types.SimpleNamespace(config=config, states=states, logits=logits,
                               eval_logits=eval_logits)


@pytest.fixture(scope='module')
def tf():
  """TensorFlow, imported by the tests that load an export (not at collection)."""
  from input_pipeline.tf_setup import tf as tensorflow  # pylint: disable=g-import-not-at-top
  return tensorflow


def _images(n: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (n, SIZE, SIZE, 3), np.uint8)


@pytest.fixture(scope='module')
def serve(exported, tf):
  """The export's signature, loaded once (TensorFlow compiles the embedded
  program once per batch size)."""
  return tf.saved_model.load(exported).signatures[export.SIGNATURE]


def test_the_saved_model_gives_the_trainers_eval_logits_for_any_batch(serve, trainer_side,
                                                                     tf):
  (spec,) = serve.structured_input_signature[1].values()
  assert list(serve.structured_input_signature[1]) == ['images']
  assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, SIZE, SIZE, 3]
  assert list(serve.structured_outputs) == ['logits']
  for n in (5, 1):
    images = _images(n, seed=n)
    logits = serve(images=tf.constant(images))['logits'].numpy()
    assert logits.shape == (n, NUM_CLASSES) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, trainer_side.eval_logits('raw', images),
                               atol=ATOL, rtol=0)


def test_export_json_says_what_the_model_takes_and_where_it_came_from(trained, exported):
  with open(os.path.join(exported, export.METADATA_FILE_NAME)) as f:
    info = json.load(f)
  assert info['signature'] == 'serving_default'
  assert info['inputs'] == {'images': {'dtype': 'uint8', 'shape': [None, SIZE, SIZE, 3]}}
  assert info['outputs'] == {'logits': {'dtype': 'float32', 'shape': [None, NUM_CLASSES]}}
  assert info['class_names'] == CLASS_NAMES and info['num_classes'] == NUM_CLASSES
  prep = info['preprocessing']
  assert (prep['image_size'], prep['view'], prep['keeps_aspect_ratio']) == (SIZE, 'resize', False)
  np.testing.assert_allclose(prep['mean_rgb'], step_functions.RGB_MEAN, rtol=1e-6)
  np.testing.assert_allclose(prep['std_rgb'], step_functions.RGB_STD, rtol=1e-6)
  assert info['checkpoint'] == {'directory': os.path.join(trained, 'checkpoints'),
                                'step': STEPS, 'weights': 'raw'}
  assert info['model']['dtype'] == 'float32' and info['platforms'] == ['cpu']


def test_an_ema_export_holds_the_moving_average(trained, trainer_side, tmp_path,
                                                monkeypatch):
  """eval.weights=ema: the average in the parameters' place, in step_N_ema.
  (The conversion is the raw export's, checked above; here it only records
  what it was given.)"""
  written = {}

  def record(path, model, variables, image_size):
    del model, image_size
    written.update(path=path, variables=variables)
  monkeypatch.setattr(export, 'write_saved_model', record)
  workdir = str(tmp_path / 'run')
  shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns('export'))
  config = schema.load_saved(workdir)
  config.eval.weights = 'ema'
  destination = os.path.join(workdir, 'export', f'step_{STEPS}_ema')
  assert export.run_export(config, workdir) == {
      'export_dir': destination, 'step': STEPS, 'weights': 'ema'}
  assert os.listdir(os.path.join(workdir, 'export')) == [f'step_{STEPS}_ema']
  assert os.path.dirname(written['path']) == os.path.dirname(destination)  # renamed
  ema, raw = trainer_side.states['ema'], trainer_side.states['raw']
  for name, want in (('params', ema.params), ('batch_stats', raw.batch_stats)):
    got, want = (tree_paths.leaves_by_path(t) for t in (written['variables'][name], want))
    assert set(got) == set(want)
    for path, array in got.items():
      np.testing.assert_array_equal(array, np.asarray(want[path]), err_msg=path)
  # The average is not the raw weights, so the check above can fail.
  head = written['variables']['params']['head']['kernel']
  assert np.abs(head - np.asarray(raw.params['head']['kernel'])).max() > 1e-4
  with open(os.path.join(destination, export.METADATA_FILE_NAME)) as f:
    assert json.load(f)['checkpoint']['weights'] == 'ema'


def test_an_existing_export_dir_is_refused_and_left_as_it_was(trained, exported):
  def contents():
    return {name: os.path.getmtime(os.path.join(exported, name))
            for name in os.listdir(exported)}
  before = contents()
  with pytest.raises(UsageError) as e:
    export.run_export(schema.load_saved(trained), trained)
  assert str(e.value) == (f'export.dir={exported} exists; remove it or set '
                          'export.dir to a new directory')
  assert contents() == before
  assert os.listdir(os.path.dirname(exported)) == [os.path.basename(exported)]


@pytest.mark.parametrize('case, message', [
    ('no_checkpoint', 'no checkpoint to evaluate; train first'),
    ('remote_dir', 'export.dir=gs://bucket/model: a local directory is expected'),
    ('no_such_step', 'eval.checkpoint=7: no such checkpoint; available: 2'),
])
def test_bad_inputs_are_refused_in_one_line_before_anything_is_written(
    trained, tmp_path, case, message):
  workdir = str(tmp_path / 'run')
  if case == 'no_checkpoint':
    os.makedirs(workdir)
    shutil.copy(os.path.join(trained, schema.CONFIG_FILE_NAME), workdir)
  else:
    shutil.copytree(trained, workdir, ignore=shutil.ignore_patterns('export'))
  config = schema.load_saved(workdir)
  config.export.dir = 'gs://bucket/model' if case == 'remote_dir' else ''
  config.eval.checkpoint = '7' if case == 'no_such_step' else 'latest'
  with pytest.raises(UsageError) as e:
    export.run_export(config, workdir)
  assert message in str(e.value) and '\n' not in str(e.value)
  assert not os.path.exists(os.path.join(workdir, 'export'))


def test_a_failed_export_leaves_no_directory_behind(trained, tmp_path, monkeypatch):
  def fail_half_way(path, *args):
    del args
    with open(os.path.join(path, 'saved_model.pb'), 'wb') as f:
      f.write(b'half')
    raise RuntimeError('disk full')
  monkeypatch.setattr(export, 'write_saved_model', fail_half_way)
  config = schema.load_saved(trained)
  config.export.dir = str(tmp_path / 'out' / 'model')
  with pytest.raises(RuntimeError, match='disk full'):
    export.run_export(config, trained)
  assert os.listdir(tmp_path / 'out') == []


# --- docs/export.md's code blocks, run as written ----------------------------

def _doc_block(marker: str) -> str:
  """The fenced Python block right after the HTML comment naming `marker`."""
  with open(os.path.join(REPO, 'docs', 'export.md')) as f:
    text = f.read()
  found = re.search(rf'<!-- tests/test_export.py runs this block {marker}\. -->\n'
                    r'```python\n(.*?)```', text, re.S)
  assert found, f'docs/export.md: no block marked "{marker}"'
  return found.group(1)


def _replaced(code: str, old: str, new: str) -> str:
  assert code.count(old) == 1, f'the documented block no longer holds {old!r}'
  return code.replace(old, new)


def test_the_documented_orbax_block_reads_params_batch_stats_and_ema(
    trained, serve, trainer_side, tf):
  code = _replaced(_doc_block('against a trained checkpoint'),
                   "'/abs/path/to/workdir/checkpoints/1000/state'",
                   repr(os.path.join(trained, 'checkpoints', str(STEPS), 'state')))
  namespace = {}
  exec(code, namespace)  # pylint: disable=exec-used
  raw = trainer_side.states['raw']
  expected = {'params': raw.params, 'batch_stats': raw.batch_stats,
              'ema': trainer_side.states['ema'].params}
  for name, tree in expected.items():
    got, want = (tree_paths.leaves_by_path(t) for t in (namespace[name], tree))
    assert set(got) == set(want), name
    for path, array in got.items():
      assert isinstance(array, np.ndarray), path
      np.testing.assert_array_equal(array, np.asarray(want[path]), err_msg=path)
  assert namespace['step'] == STEPS
  assert namespace['shapes']['head/kernel'] == raw.params['head']['kernel'].shape
  images = _images(5)
  from_tf = serve(images=tf.constant(images))['logits'].numpy()
  np.testing.assert_allclose(trainer_side.logits(namespace['variables'], images), from_tf,
                             atol=ATOL, rtol=0)


def test_the_documented_serving_block_classifies_an_image_as_evaluation_views_it(
    exported, trainer_side, tmp_path, capsys, tf):
  picture = str(tmp_path / 'picture.png')
  Image.fromarray(np.random.default_rng(1).integers(0, 256, (37, 23, 3), np.uint8)).save(
      picture)
  code = _replaced(_doc_block('against an export'), "'runs/mine/export/step_1000'",
                   repr(exported))
  code = _replaced(code, "'cat.jpg'", repr(picture))
  namespace = {}
  exec(code, namespace)  # pylint: disable=exec-used
  # The run's own evaluation view of the file (input_pipeline/single_images.py).
  view = single_images.eval_view(trainer_side.config.data)(tf.constant(picture)).numpy()
  expected = trainer_side.eval_logits('raw', view[None])[0]
  np.testing.assert_allclose(namespace['logits'], expected, atol=ATOL, rtol=0)
  assert capsys.readouterr().out.strip() == CLASS_NAMES[int(np.argmax(expected))]


def test_a_timm_export_reads_back_bit_for_bit_and_says_what_it_is(trained, trainer_side,
                                                                  tmp_path):
  from trainer import init_weights  # pylint: disable=g-import-not-at-top
  config = schema.load_saved(trained)
  config.export.format, config.export.dir = 'timm', str(tmp_path / 'timm')
  summary = export.run_export(config, trained)
  assert summary == {'export_dir': str(tmp_path / 'timm'), 'step': STEPS, 'weights': 'raw'}
  assert sorted(os.listdir(tmp_path / 'timm')) == ['export.json', 'model.safetensors']
  with open(tmp_path / 'timm' / 'export.json') as f:
    info = json.load(f)
  assert (info['format'], info['file'], info['num_classes']) == (
      'timm', 'model.safetensors', NUM_CLASSES)
  assert info['preprocessing']['normalization'].startswith('before the model')
  config.init.from_weights = str(tmp_path / 'timm' / 'model.safetensors')
  exp = experiment.build_without_data(config, NUM_CLASSES)
  read = init_weights.load(exp.abstract_state, config)
  state = trainer_side.states['raw']
  saved = tree_paths.leaves_by_path({'params': state.params, 'batch_stats': state.batch_stats})
  assert set(read) == set(saved)
  for path, array in read.items():
    assert np.array_equal(array, np.asarray(saved[path])), path


def test_a_layout_without_this_model_is_refused_before_the_export():
  from configs import default  # pylint: disable=g-import-not-at-top
  from modes import checks  # pylint: disable=g-import-not-at-top
  config = default.get_config()  # resnet18
  config.export.format = 'big_vision'
  with pytest.raises(UsageError, match='export.format=big_vision: its layout holds ViT '
                     'models, not model.name=resnet18'):
    checks.check_export(config)
  config.model.name, config.export.format = 'vgg16', 'timm'
  with pytest.raises(UsageError, match='holds ViT and ResNet models, not model.name=vgg16'):
    checks.check_export(config)
