"""Specification of the tfds source: sharding, resume, eval coverage, bad data.

The data sets are tiny tfds data sets that the tests prepare themselves
(array_record and TFRecord, the two formats a prepared data dir can hold),
and ImageNet itself under tfds.testing.mock_data.
"""

import io
import os

import numpy as np
from PIL import Image
import pytest

from configs import default
import input_pipeline
from tests.helpers import create_dataset
from tests.helpers import take

SIZE = 16
CLASSES = ['ant', 'bee', 'cat']
NUM_TRAIN, NUM_EVAL = 24, 11  # 11 % 4 != 0: the last eval batch is padded
FORMATS = ['array_record', 'tfrecord']


def _jpeg(example_id: int, label: int, size=(24, 18)) -> bytes:
  """A solid JPEG whose colour names the example (JPEG keeps solid colours)."""
  colour = (8 + 16 * (example_id % 16), 8 + 16 * (example_id // 16),
            8 + 16 * label)
  buffer = io.BytesIO()
  Image.new('RGB', size, colour).save(buffer, 'JPEG', quality=95)
  return buffer.getvalue()


def _example_id(image: np.ndarray) -> int:
  r, g = (int(round((float(c) - 8) / 16)) for c in image[SIZE // 2, SIZE // 2, :2])
  return r + 16 * g


def _prepare(data_dir, file_format: str, train: dict, evaluation: dict) -> str:
  """Writes the tfds data set 'tiny_images' with splits train, validation."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  features = tfds.features.FeaturesDict({
      'image': tfds.features.Image(encoding_format='jpeg'),
      'label': tfds.features.ClassLabel(names=CLASSES)})
  split = lambda examples: [(i, {'image': jpeg, 'label': label})
                            for i, (jpeg, label) in examples.items()]
  tfds.dataset_builders.store_as_tfds_dataset(
      name='tiny_images', version='1.0.0', features=features,
      split_datasets={'train': split(train), 'validation': split(evaluation)},
      data_dir=str(data_dir), file_format=file_format)
  return str(data_dir)


def _clean_splits():
  train = {i: (_jpeg(i, i % 3), i % 3) for i in range(NUM_TRAIN)}
  evaluation = {i: (_jpeg(i, i % 3), i % 3)
                for i in range(NUM_TRAIN, NUM_TRAIN + NUM_EVAL)}
  return train, evaluation


@pytest.fixture(scope='module', params=FORMATS)
def tiny(request, tmp_path_factory):
  """A prepared tfds data dir: 24 training and 11 evaluation JPEGs."""
  return _prepare(tmp_path_factory.mktemp(request.param), request.param,
                  *_clean_splits())


def _data_config(data_dir, **overrides):
  data = default.get_config().data
  data.update(dict(source='tfds', name='tiny_images', dir=str(data_dir),
                   eval_split='validation', image_size=SIZE,
                   augment='inception_crop'))
  data.update(overrides)
  return data


def _eval_ids(ds):
  batches = list(ds.eval_batches())
  assert len(batches) == ds.num_eval_batches
  return [_example_id(image) for b in batches
          for image, valid in zip(b['image'], b['mask']) if valid], batches


# --- Batches ----------------------------------------------------------------


def test_batches_are_uint8_images_and_int32_labels_of_the_local_share(tiny):
  ds = create_dataset(_data_config(tiny), process_index=1, process_count=2)
  assert ds.class_names == CLASSES and ds.num_classes == 3
  assert (ds.num_train_examples, ds.num_eval_examples) == (NUM_TRAIN, NUM_EVAL)
  train = next(ds.train_batches())
  assert set(train) == {'image', 'label'}
  assert train['image'].shape == (4, SIZE, SIZE, 3)
  assert train['image'].dtype == np.uint8
  assert train['label'].shape == (4,) and train['label'].dtype == np.int32
  evaluation = next(ds.eval_batches())
  assert set(evaluation) == {'image', 'label', 'mask'}
  assert evaluation['image'].shape == (2, SIZE, SIZE, 3)
  assert evaluation['mask'].dtype == bool
  assert ds.skipped_counts() == {'train': 0, 'eval': 0}


def test_labels_come_with_their_images(tiny):
  ds = create_dataset(_data_config(tiny))
  for batch in take(ds.train_batches(), 3):
    ids = [_example_id(image) for image in batch['image']]
    assert list(batch['label']) == [i % 3 for i in ids]


# --- Evaluation coverage ----------------------------------------------------


def test_eval_covers_every_example_once_when_size_does_not_divide_batch(tiny):
  ds = create_dataset(_data_config(tiny), eval_batch_size=4)
  ids, batches = _eval_ids(ds)
  assert ds.num_eval_batches == 3  # ceil(11 / 4)
  assert sorted(ids) == list(range(NUM_TRAIN, NUM_TRAIN + NUM_EVAL))
  assert [int(b['mask'].sum()) for b in batches] == [4, 4, 3]
  assert ds.skipped_counts()['eval'] == 0


def test_eval_over_two_processes_covers_every_example_once(tiny):
  shards = [_eval_ids(create_dataset(_data_config(tiny), eval_batch_size=4,
                              process_index=p, process_count=2))
            for p in range(2)]
  # SPMD: every process runs the same number of eval steps.
  assert len(shards[0][1]) == len(shards[1][1]) == 3
  assert sorted(shards[0][0] + shards[1][0]) == list(
      range(NUM_TRAIN, NUM_TRAIN + NUM_EVAL))


# --- Training order: sharding and resume ------------------------------------


def test_two_processes_read_disjoint_shares_that_cover_the_split(tiny):
  data = _data_config(tiny)
  whole = take(create_dataset(data).train_batches(), 3)  # one epoch: 3 x 8 = 24
  halves = [take(create_dataset(data, process_index=p,
                          process_count=2).train_batches(), 3)
            for p in range(2)]
  read = [{_example_id(image) for b in half for image in b['image']}
          for half in halves]
  assert not read[0] & read[1]
  assert read[0] | read[1] == set(range(NUM_TRAIN))
  # Together they are the single-process batch, pixel for pixel.
  for step in range(3):
    for key in ('image', 'label'):
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][key], halves[1][step][key]]),
          whole[step][key])


@pytest.mark.parametrize('augment', ['inception_crop', 'crop_flip'])
def test_resumed_stream_equals_uninterrupted_stream_bitwise(tiny, augment):
  data = _data_config(tiny, augment=augment)
  uninterrupted = take(create_dataset(data, seed=7).train_batches(), 5)
  resumed = take(create_dataset(data, seed=7).train_batches(start_step=3), 2)
  for expected, actual in zip(uninterrupted[3:], resumed):
    for key in ('image', 'label'):
      np.testing.assert_array_equal(actual[key], expected[key])


def test_scaled_jpeg_decoding_reaches_the_decoder_and_keeps_exact_resume(tiny):
  from input_pipeline import crops  # pylint: disable=g-import-not-at-top
  # At 8 px most crops of the 24x18 images decode at half scale.
  data = _data_config(tiny, image_size=8, jpeg_scaled_decode=True)
  dataset = create_dataset(data, seed=7)
  # pylint: disable-next=protected-access
  assert dataset._decoding == crops.JpegDecoding(scaled_to=8)
  uninterrupted = take(dataset.train_batches(), 4)
  resumed = take(create_dataset(data, seed=7).train_batches(start_step=2), 2)
  for expected, actual in zip(uninterrupted[2:], resumed):
    np.testing.assert_array_equal(actual['image'], expected['image'])


def test_seed_changes_the_order(tiny):
  first = next(create_dataset(_data_config(tiny), seed=1).train_batches())
  second = next(create_dataset(_data_config(tiny), seed=2).train_batches())
  assert not np.array_equal(first['label'], second['label']) or (
      not np.array_equal(first['image'], second['image']))


# --- Bad data ---------------------------------------------------------------


@pytest.fixture(scope='module', params=FORMATS)
def with_corrupt(request, tmp_path_factory):
  """The tiny data set with 2 unreadable JPEGs in each split."""
  train, evaluation = _clean_splits()
  for split, (garbage, truncated) in ((train, (5, 17)),
                                      (evaluation, (26, 33))):
    split[garbage] = (b'\xff\xd8\xff\xe0 not really a jpeg', 0)
    jpeg, label = split[truncated]
    split[truncated] = (jpeg[:len(jpeg) // 2], label)
  return _prepare(tmp_path_factory.mktemp(request.param), request.param,
                  train, evaluation)


def test_corrupt_jpegs_are_skipped_and_counted_in_training(with_corrupt):
  ds = create_dataset(_data_config(with_corrupt))
  epoch = take(ds.train_batches(), 3)  # every training example once
  for batch in epoch:
    assert batch['image'].shape == (8, SIZE, SIZE, 3)  # still full
  ids = {_example_id(image) for b in epoch for image in b['image']}
  assert ids == set(range(NUM_TRAIN)) - {5, 17}
  assert ds.skipped_counts()['train'] == 2


@pytest.mark.parametrize('tiny, with_corrupt', [(f, f) for f in FORMATS],
                         indirect=True)
def test_examples_sharing_a_chunk_with_a_corrupt_one_keep_their_pixels(
    tiny, with_corrupt):
  # A corrupt JPEG drops its whole chunk in tf.data; the other examples of
  # the chunk are decoded again on their own and must come out exactly as
  # from a clean copy of the data set in the same format.
  _, clean = _eval_ids(create_dataset(_data_config(tiny)))
  _, damaged = _eval_ids(create_dataset(_data_config(with_corrupt)))
  kept = 0
  for expected, actual in zip(clean, damaged):
    for slot in np.flatnonzero(actual['mask']):
      np.testing.assert_array_equal(actual['image'][slot],
                                    expected['image'][slot])
      kept += 1
  assert kept == NUM_EVAL - 2


def test_corrupt_jpegs_are_masked_and_counted_in_evaluation(with_corrupt):
  ds = create_dataset(_data_config(with_corrupt), eval_batch_size=4)
  ids, batches = _eval_ids(ds)
  assert len(batches) == 3
  assert sorted(ids) == sorted(set(range(NUM_TRAIN, NUM_TRAIN + NUM_EVAL)) -
                               {26, 33})
  assert ds.skipped_counts()['eval'] == 2
  # Evaluated plus unreadable is the whole split: nothing silently dropped.
  assert sum(int(b['mask'].sum()) for b in batches) + 2 == ds.num_eval_examples
  list(ds.eval_batches())  # a second pass counts afresh
  assert ds.skipped_counts()['eval'] == 2


def test_resume_is_exact_with_corrupt_examples(with_corrupt):
  data = _data_config(with_corrupt)
  uninterrupted = take(create_dataset(data).train_batches(), 6)
  resumed = take(create_dataset(data).train_batches(start_step=4), 2)
  for expected, actual in zip(uninterrupted[4:], resumed):
    np.testing.assert_array_equal(actual['image'], expected['image'])


# --- Errors -----------------------------------------------------------------


def test_unknown_split_raises_data_error_naming_the_splits(tiny):
  with pytest.raises(input_pipeline.DataError, match='validation'):
    create_dataset(_data_config(tiny, eval_split='test'))


def test_class_map_of_other_data_raises_data_error(tiny, tmp_path):
  path = tmp_path / 'classes.json'
  path.write_text('{"dog": 0, "eel": 1, "fox": 2}')
  with pytest.raises(input_pipeline.DataError, match='classes'):
    create_dataset(_data_config(tiny), class_map_path=str(path))


def test_the_folder_default_eval_split_val_means_validation(tiny):
  ds = create_dataset(_data_config(tiny, eval_split='val'))
  assert ds.num_eval_examples == NUM_EVAL
