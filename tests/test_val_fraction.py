"""Specification of data.val_fraction: one folder of classes, split by seed."""

import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from configs import default
import input_pipeline
from input_pipeline import folder
from tests.helpers import REPO, create_dataset, run_main

COUNTS = {'ant': 2, 'bee': 3, 'cat': 10, 'dog': 25}


def _make_classes(root, counts=None, *, real_images=False) -> None:
  """Class folders directly under `root`; empty files unless `real_images`."""
  for label, (name, count) in enumerate(sorted((counts or COUNTS).items())):
    os.makedirs(root / name, exist_ok=True)
    for i in range(count):
      path = root / name / f'{i:03d}.png'
      if real_images:
        Image.fromarray(np.full((8, 8, 3), 30 * label, np.uint8)).save(path)
      else:
        path.touch()


def _data_config(root, **overrides):
  data = default.get_config().data
  data.update(source='folder', dir=str(root), image_size=8, augment='none',
              val_fraction=0.2)
  data.update(overrides)
  return data


def _split(root, seed=0, fraction=0.2):
  names, train, evaluation = folder.split_folder(str(root), fraction, seed, None)
  return names, train, evaluation


def test_split_is_disjoint_complete_and_keeps_every_class_in_both(tmp_path):
  _make_classes(tmp_path)
  names, train, evaluation = _split(tmp_path)
  assert names == sorted(COUNTS)
  assert not set(train.paths) & set(evaluation.paths)
  every_file = {str(p) for p in tmp_path.rglob('*.png')}
  assert set(train.paths) | set(evaluation.paths) == every_file
  for split in (train, evaluation):
    assert sorted(set(split.labels.tolist())) == list(range(len(COUNTS)))
    for path, label in zip(split.paths, split.labels):
      assert os.path.basename(os.path.dirname(path)) == names[label]


@pytest.mark.parametrize('num_files,fraction,held', [
    (10, 0.2, 2), (25, 0.2, 5), (2, 0.9, 1), (3, 0.01, 1), (2, 0.5, 1)])
def test_each_class_holds_out_its_fraction_but_at_least_one_and_keeps_one(
    num_files, fraction, held):
  indices = folder.held_out_indices(num_files, fraction, 0, 'cat')
  assert len(indices) == held
  assert len(set(indices.tolist())) == held
  assert all(0 <= i < num_files for i in indices)


def test_same_seed_gives_the_same_split_in_another_process(tmp_path):
  _make_classes(tmp_path)
  _, _, evaluation = _split(tmp_path, seed=7)
  code = ('import json, sys\n'
          'from input_pipeline import folder\n'
          f'_, _, e = folder.split_folder({str(tmp_path)!r}, 0.2, 7, None)\n'
          'print(json.dumps(e.paths))\n')
  # Another hash seed: the split must not depend on Python's str hashing.
  env = dict(os.environ, PYTHONPATH=REPO, PYTHONHASHSEED='123')
  out = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=env,
                       check=True, capture_output=True, text=True).stdout
  assert json.loads(out) == evaluation.paths


def test_different_seeds_give_different_splits(tmp_path):
  _make_classes(tmp_path)
  held = [set(_split(tmp_path, seed=s)[2].paths) for s in (0, 1, 2)]
  assert held[0] != held[1] and held[1] != held[2] and held[0] != held[2]


def test_a_class_keeps_its_split_when_another_class_is_added(tmp_path):
  _make_classes(tmp_path)
  before = {p for p in _split(tmp_path)[2].paths if '/dog/' in p}
  _make_classes(tmp_path, {'eel': 4})
  after = {p for p in _split(tmp_path)[2].paths if '/dog/' in p}
  assert before == after


def test_create_dataset_trains_and_evaluates_on_the_split(tmp_path):
  data_dir, workdir = tmp_path / 'data', tmp_path / 'work'
  _make_classes(data_dir, {'ant': 5, 'bee': 5}, real_images=True)
  class_map = workdir / 'classes.json'
  ds = create_dataset(_data_config(data_dir, val_fraction=0.4), batch_size=2,
                      eval_batch_size=2, class_map_path=str(class_map))
  assert ds.class_names == ['ant', 'bee']
  assert (ds.num_train_examples, ds.num_eval_examples) == (6, 4)
  assert json.loads(class_map.read_text()) == {'ant': 0, 'bee': 1}
  labels = np.concatenate([b['label'][b['mask']] for b in ds.eval_batches()])
  assert sorted(labels.tolist()) == [0, 0, 1, 1]


# --- Errors: one line, before any work ---------------------------------------


@pytest.mark.parametrize('fraction', [-0.1, 1.0, 1.5])
def test_a_fraction_outside_zero_to_one_is_an_error(tmp_path, fraction):
  _make_classes(tmp_path)
  with pytest.raises(input_pipeline.DataError, match=r'val_fraction must be in \[0, 1\)'):
    input_pipeline.check_data_config(_data_config(tmp_path, val_fraction=fraction))


@pytest.mark.parametrize('splits', [('train', 'val'), ('train',)])
def test_a_fraction_with_train_and_val_folders_is_ambiguous(tmp_path, splits):
  for split in splits:
    _make_classes(tmp_path / split)
  with pytest.raises(input_pipeline.DataError) as error:
    input_pipeline.check_data_config(_data_config(tmp_path))
  message = str(error.value)
  assert 'data.val_fraction=0.2' in message and 'train/' in message
  assert '\n' not in message


def test_no_train_folder_and_no_fraction_says_how_to_fix_it(tmp_path):
  _make_classes(tmp_path)
  with pytest.raises(input_pipeline.DataError) as error:
    input_pipeline.check_data_config(_data_config(tmp_path, val_fraction=0.0))
  message = str(error.value)
  assert f'{tmp_path}/train/<class>' in message
  assert 'set data.val_fraction' in message


def test_a_class_with_one_image_is_named(tmp_path):
  _make_classes(tmp_path, {'ant': 1, 'bee': 3, 'cat': 0})
  with pytest.raises(input_pipeline.DataError,
                     match=r'too few in: ant, cat$'):
    input_pipeline.check_data_config(_data_config(tmp_path))


def test_a_fraction_on_data_with_its_own_splits_is_an_error(tmp_path):
  with pytest.raises(input_pipeline.DataError, match='val_fraction=0.2'):
    input_pipeline.check_data_config(
        _data_config(tmp_path, source='shapes'))


def test_main_exits_2_with_one_line_and_writes_nothing(tmp_path):
  data_dir, workdir = tmp_path / 'data', tmp_path / 'work'
  _make_classes(data_dir, {'ant': 1, 'bee': 3})
  result = run_main('--workdir', str(workdir), '--config.data.source=folder',
                    f'--config.data.dir={data_dir}',
                    '--config.data.val_fraction=0.1', timeout=120)
  assert result.returncode == 2, result.stderr
  assert result.stderr.strip().splitlines() == [
      f'error: data.val_fraction=0.1 needs at least 2 images in every class '
      f'folder of {data_dir} (one to train on, one to hold out); too few in: '
      'ant']
  assert not workdir.exists()
