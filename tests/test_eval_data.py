"""Evaluation data other than the training set's own split: which data
eval.dataset, eval.split and eval.data_dir describe, and the data set that
trains on one and evaluates on the other."""

import numpy as np
import pytest

from configs import default
from core.errors import UsageError
from input_pipeline import DataError, PairedDataset
from input_pipeline import shapes
from input_pipeline.synthetic import SyntheticDataset
from trainer import eval_data


def _config(**values):
  config = default.get_config()
  for key, value in values.items():
    node = config
    *parents, leaf = key.split('.')
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def test_without_eval_keys_evaluation_reads_the_training_data():
  assert eval_data.eval_data_config(_config()) is None


def test_another_tfds_data_set_is_read_alone_from_its_own_split():
  config = _config(**{'data.source': 'tfds', 'data.name': 'imagenet2012',
                      'data.dir': '/data/tfds', 'eval.dataset': 'imagenet_v2',
                      'eval.split': 'test'})
  data = eval_data.eval_data_config(config)
  assert (data.name, data.dir, data.eval_split) == ('imagenet_v2', '/data/tfds', 'test')
  assert data.train_split == 'test'  # no training split needs to exist there
  assert config.data.name == 'imagenet2012'  # the run's own config is untouched


def test_another_folder_keeps_the_other_data_keys():
  config = _config(**{'data.source': 'folder', 'data.dir': '/images', 'data.image_size': 48,
                      'data.val_fraction': 0.1, 'eval.data_dir': '/other'})
  data = eval_data.eval_data_config(config)
  assert (data.source, data.dir, data.eval_split, data.image_size) == (
      'folder', '/other', 'val', 48)
  assert data.val_fraction == 0.0  # the other folder is read whole


def test_a_split_of_the_shapes_data_is_read_as_a_folder(tmp_path):
  data = eval_data.eval_data_config(_config(**{'data.dir': str(tmp_path),
                                               'eval.split': 'train'}))
  assert (data.source, data.dir, data.eval_split) == ('folder', str(tmp_path), 'train')
  assert eval_data.eval_data_config(_config(**{'eval.split': 'val'})).dir == shapes.default_dir()


@pytest.mark.parametrize('values,fragment', [
    ({'eval.split': 'test'}, 'eval.split'),  # shapes has train and val only
    ({'data.source': 'synthetic', 'eval.split': 'val'}, "data.source='synthetic'"),
])
def test_eval_keys_that_name_no_data_are_usage_errors(values, fragment):
  with pytest.raises(UsageError, match=fragment):
    eval_data.eval_data_config(_config(**values))


def _synthetic(num_classes, num_examples=24, seed=0):
  return SyntheticDataset(num_examples=num_examples, num_classes=num_classes, image_size=8,
                          batch_size=8, eval_batch_size=6, seed=seed)


def test_a_paired_data_set_trains_on_one_and_evaluates_on_the_other():
  train, evaluation = _synthetic(10), _synthetic(10, num_examples=18, seed=1)
  paired = PairedDataset(train, evaluation, eval_name='other')
  assert paired.num_train_examples == 24 and paired.num_eval_examples == 18
  assert paired.num_eval_batches == evaluation.num_eval_batches == 3
  np.testing.assert_array_equal(next(paired.train_batches(2))['image'],
                                next(train.train_batches(2))['image'])
  for got, want in zip(paired.eval_batches(), evaluation.eval_batches()):
    np.testing.assert_array_equal(got['image'], want['image'])
    np.testing.assert_array_equal(got['mask'], want['mask'])


def test_evaluation_data_with_other_classes_is_refused():
  with pytest.raises(DataError, match='other-set cannot evaluate this run.*5 against 10'):
    PairedDataset(_synthetic(10), _synthetic(5), eval_name='other-set')
