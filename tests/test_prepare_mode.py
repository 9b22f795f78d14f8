"""Specification of --mode=prepare: the data made ready once, by one process."""

import functools
import os

import pytest

from configs import default
from core.errors import UsageError
from input_pipeline import prepare
from input_pipeline import shapes
from tests.helpers import run_main


def _data(**values):
  data = default.get_config().data
  data.update(values)
  return data


def test_prepare_generates_shapes_once_then_says_it_is_there(tmp_path,
                                                             monkeypatch):
  # A tiny shapes data set: the full one takes seconds to generate.
  monkeypatch.setattr(shapes, 'ensure', functools.partial(
      shapes.ensure, train_per_class=2, val_per_class=1, image_size=8))
  root = tmp_path / 'shapes'
  data = _data(source='shapes', dir=str(root))
  first = prepare.prepare_data(data, seed=0, multi_process=False)
  assert first == (f'shapes data set generated in {root}: 10 classes, '
                   '20 training and 10 evaluation images')
  assert sorted(os.listdir(root)) == ['train', 'val']
  again = prepare.prepare_data(data, seed=0, multi_process=False)
  assert again.startswith(f'shapes data set already generated in {root}')


def test_prepare_lists_a_folder_and_its_held_out_split(tmp_path):
  for name, count in (('ant', 4), ('bee', 6)):
    os.makedirs(tmp_path / name)
    for i in range(count):
      (tmp_path / name / f'{i}.jpg').touch()
  line = prepare.prepare_data(
      _data(source='folder', dir=str(tmp_path), val_fraction=0.5), seed=3,
      multi_process=False)
  assert line.startswith(f'image folder {tmp_path} is read as it is, nothing '
                         'to prepare: 2 classes, 5 training and 5 evaluation')


def test_prepare_refuses_to_run_as_several_processes():
  with pytest.raises(UsageError, match='runs as one process'):
    prepare.prepare_data(_data(source='synthetic'), seed=0, multi_process=True)


def test_main_prepares_shapes_and_writes_nothing_in_the_workdir(shapes_dir,
                                                                tmp_path):
  # The session's shapes data set, which its fixture has generated.
  done = 'already generated' if shapes.is_complete(shapes_dir) else 'generated'
  workdir = tmp_path / 'work'
  result = run_main('--mode=prepare', f'--workdir={workdir}',
                    '--config.data.source=shapes',
                    f'--config.data.dir={shapes_dir}', timeout=300)
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines() == [
      f'shapes data set {done} in {shapes_dir}: 10 classes, 5000 training and '
      '600 evaluation images']
  assert shapes.is_complete(shapes_dir)
  assert not workdir.exists()


@pytest.mark.parametrize('flags,message', [
    (['--config.data.source=tfds', '--config.data.name=imagenet2012'],
     'no prepared tfds data set imagenet2012 in {data}'),
    (['--config.data.source=synthetic', '--num_processes=2'],
     '--mode=prepare runs as one process'),
])
def test_main_prepare_errors_are_one_line_and_exit_2(tmp_path, flags, message):
  # No --workdir: prepare writes nothing there and does not need one.
  result = run_main('--mode=prepare', f'--config.data.dir={tmp_path}', *flags,
                    timeout=120)
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ')
  assert message.format(data=tmp_path) in lines[0]
  assert os.listdir(tmp_path) == []


def test_prepare_says_a_prepared_tfds_data_set_is_there(tmp_path):
  # The tiny tfds data set of test_input_tfds.py, written there by tfds.
  # pylint: disable=g-import-not-at-top,protected-access
  from tests import test_input_tfds as tiny
  data_dir = tiny._prepare(tmp_path, 'array_record', *tiny._clean_splits())
  line = prepare.prepare_data(tiny._data_config(data_dir), seed=0,
                              multi_process=False)
  assert line == (f'tfds data set tiny_images already prepared in {data_dir}: '
                  '3 classes; splits: train 24, validation 11')


def test_prepare_reports_a_tfds_set_made_from_the_manual_dir(tmp_path):
  # tfds.testing.mock_data stands in for the archives and their preparation.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from tests.test_tfds_imagenet import _imagenet_config  # pylint: disable=g-import-not-at-top
  data = _imagenet_config(tmp_path)
  with tfds.testing.mock_data(num_examples=10):
    line = prepare.prepare_data(data, seed=0, multi_process=False)
  assert line.startswith(f'tfds data set imagenet2012 now prepared in '
                         f'{data.dir}: 1000 classes')
