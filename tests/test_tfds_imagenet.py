"""Specification of the imagenet2012 path and of the cheap tfds data checks.

ImageNet runs end to end under tfds.testing.mock_data: the split metadata
is empty there and split slices are ignored, so the pipeline must (and does)
take its sizes from the data source itself.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import default
import input_pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARS = ('ILSVRC2012_img_train.tar', 'ILSVRC2012_img_val.tar')


def _imagenet_config(tmp_path, manual_files=TARS, **overrides):
  """imagenet2012 not prepared in tmp_path/tfds, archives in tmp_path/manual."""
  manual = tmp_path / 'manual'
  manual.mkdir(exist_ok=True)
  for name in manual_files:
    (manual / name).write_bytes(b'')
  data = default.get_config().data
  data.update(dict(source='tfds', name='imagenet2012',
                   dir=str(tmp_path / 'tfds'), manual_dir=str(manual),
                   eval_split='validation', image_size=32,
                   augment='inception_crop'))
  data.update(overrides)
  return data


@pytest.fixture
def mock_imagenet():
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  with tfds.testing.mock_data(num_examples=10):
    yield


def test_imagenet2012_prepared_from_the_manual_dir_end_to_end(
    tmp_path, mock_imagenet):
  del mock_imagenet
  ds = input_pipeline.create_dataset(
      _imagenet_config(tmp_path), batch_size=4, eval_batch_size=4, seed=0)
  assert ds.num_classes == 1000
  assert ds.class_names[:2] == ['n01440764', 'n01443537']
  assert (ds.num_train_examples, ds.num_eval_examples) == (10, 10)
  batches = [b for b, _ in zip(ds.train_batches(), range(5))]
  for batch in batches:
    assert batch['image'].shape == (4, 32, 32, 3)
    assert batch['image'].dtype == np.uint8
    assert batch['label'].dtype == np.int32
    assert ((batch['label'] >= 0) & (batch['label'] < 1000)).all()
  resumed = next(ds.train_batches(start_step=4))
  np.testing.assert_array_equal(resumed['image'], batches[4]['image'])
  evaluation = list(ds.eval_batches())
  assert len(evaluation) == 3
  assert sum(int(b['mask'].sum()) for b in evaluation) == 10
  assert ds.skipped_counts() == {'train': 0, 'eval': 0}


def test_imagenet2012_split_sizes_come_from_the_source_not_the_metadata(
    tmp_path, mock_imagenet):
  del mock_imagenet
  # Under mock data a slice is ignored; a pipeline that read the sizes from
  # the (empty) metadata would fail or see 0 examples here.
  ds = input_pipeline.create_dataset(
      _imagenet_config(tmp_path, train_split='train[:50%]'), batch_size=2,
      eval_batch_size=2, seed=0)
  assert ds.num_train_examples == 10


def test_multi_process_run_does_not_prepare_and_says_how(
    tmp_path, mock_imagenet):
  del mock_imagenet
  with pytest.raises(input_pipeline.DataError, match='tfds build imagenet2012'):
    input_pipeline.create_dataset(
        _imagenet_config(tmp_path), batch_size=4, eval_batch_size=4, seed=0,
        process_index=0, process_count=2)


# --- check_data_config: cheap, before any heavy import ------------------------


def _message(data) -> str:
  with pytest.raises(input_pipeline.DataError) as error:
    input_pipeline.check_data_config(data)
  message = str(error.value)
  assert '\n' not in message
  return message


def test_missing_imagenet_names_the_dir_and_the_archives_to_put_there(
    tmp_path):
  data = _imagenet_config(tmp_path, manual_files=(), manual_dir='')
  message = _message(data)
  assert str(tmp_path / 'tfds' / 'imagenet2012') in message
  assert all(name in message for name in TARS)


def test_manual_dir_without_the_archives_names_the_missing_one(tmp_path):
  message = _message(_imagenet_config(tmp_path, manual_files=TARS[:1]))
  assert str(tmp_path / 'manual') in message and TARS[1] in message


def test_a_prepared_data_set_passes_the_check(tmp_path):
  version = tmp_path / 'tfds' / 'imagenet2012' / '5.1.0'
  version.mkdir(parents=True)
  (version / 'dataset_info.json').write_text('{}')
  input_pipeline.check_data_config(
      _imagenet_config(tmp_path, manual_files=(), manual_dir=''))


def test_a_prepared_data_set_with_a_config_passes_the_check(tmp_path):
  version = tmp_path / 'tfds' / 'imagenette' / '320px-v2' / '1.0.0'
  version.mkdir(parents=True)
  (version / 'dataset_info.json').write_text('{}')
  for name in ('imagenette', 'imagenette/320px-v2', 'imagenette/320px-v2:1.0.0'):
    input_pipeline.check_data_config(_imagenet_config(
        tmp_path, manual_files=(), manual_dir='', name=name))


@pytest.mark.parametrize('key,value,expected', [
    ('name', '', 'needs data.name'),
    ('eval_crop_fraction', 0.0, 'eval_crop_fraction'),
    ('augment', 'random', 'augment'),
])
def test_bad_tfds_values_raise_one_line_data_errors(tmp_path, key, value,
                                                    expected):
  assert expected in _message(_imagenet_config(tmp_path, **{key: value}))


def test_check_data_config_imports_neither_tensorflow_nor_tfds(tmp_path):
  data = _imagenet_config(tmp_path, manual_files=(), manual_dir='')
  code = (
      'import json, sys\n'
      'from configs import default\n'
      'import input_pipeline\n'
      'data = default.get_config().data\n'
      f'data.update(json.loads({json.dumps(json.dumps(data.to_dict()))}))\n'
      'try:\n'
      '  input_pipeline.check_data_config(data)\n'
      'except input_pipeline.DataError:\n'
      '  pass\n'
      'heavy = [m for m in ("tensorflow", "tensorflow_datasets") '
      'if m in sys.modules]\n'
      'assert not heavy, heavy\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr
