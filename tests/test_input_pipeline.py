"""Specification of input_pipeline: batches, sharding, resume, eval coverage."""

import ast
import itertools
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from configs import default
import input_pipeline
from tests.helpers import create_dataset
from tests.helpers import take
from input_pipeline import order
from input_pipeline import shapes

SIZE = 16  # output resolution in these tests: small keeps them fast


def _solid(example_id: int, label: int) -> np.ndarray:
  """A non-square image whose colour names the example, surviving resizes."""
  colour = (example_id % 256, example_id // 256, 40 * label)
  return np.broadcast_to(np.array(colour, np.uint8), (20, 12, 3)).copy()


def _example_id(image: np.ndarray) -> int:
  return int(image[0, 0, 0]) + 256 * int(image[0, 0, 1])


def _make_folder(root, train: dict[str, int], val: dict[str, int]) -> None:
  """Class folders of solid PNGs; ids are unique over both splits."""
  ids = itertools.count()
  for split, counts in (('train', train), ('val', val)):
    for label, (name, count) in enumerate(sorted(counts.items())):
      os.makedirs(root / split / name, exist_ok=True)
      for _ in range(count):
        i = next(ids)
        Image.fromarray(_solid(i, label)).save(root / split / name / f'{i}.png')


def _data_config(root, **overrides):
  data = default.get_config().data
  data.source = 'folder'
  data.dir = str(root)
  data.image_size = SIZE
  data.augment = 'none'
  data.update(overrides)
  return data


@pytest.fixture
def folder(tmp_path):
  """3 classes, 9 training and 7 evaluation images (7 % 4 != 0)."""
  _make_folder(tmp_path, {'ant': 3, 'bee': 4, 'cat': 2},
               {'ant': 2, 'bee': 3, 'cat': 2})
  return tmp_path


# --- Batches ----------------------------------------------------------------


def test_batches_are_uint8_images_and_int32_labels_of_the_local_share(folder):
  ds = create_dataset(_data_config(folder), batch_size=8, eval_batch_size=4,
               process_index=1, process_count=2)
  assert (ds.num_classes, ds.class_names) == (3, ['ant', 'bee', 'cat'])
  assert (ds.num_train_examples, ds.num_eval_examples) == (9, 7)
  train = next(ds.train_batches())
  assert set(train) == {'image', 'label'}
  assert train['image'].shape == (4, SIZE, SIZE, 3)
  assert train['image'].dtype == np.uint8
  assert train['label'].shape == (4,) and train['label'].dtype == np.int32
  evaluation = next(ds.eval_batches())
  assert evaluation['image'].shape == (2, SIZE, SIZE, 3)
  assert evaluation['mask'].shape == (2,) and evaluation['mask'].dtype == bool


def test_labels_follow_the_sorted_class_folders(folder):
  ds = create_dataset(_data_config(folder))
  batch = next(ds.train_batches())
  # _solid puts 40 * label in the blue channel.
  np.testing.assert_array_equal(batch['image'][:, 0, 0, 2], 40 * batch['label'])


def test_greyscale_and_rgba_images_come_out_rgb(tmp_path):
  for split in ('train', 'val'):
    os.makedirs(tmp_path / split / 'x')
    Image.new('L', (9, 7), 100).save(tmp_path / split / 'x' / 'grey.png')
    Image.new('RGBA', (7, 9), (10, 20, 30, 128)).save(
        tmp_path / split / 'x' / 'alpha.PNG')
    Image.new('L', (8, 8), 200).save(tmp_path / split / 'x' / 'grey.JPEG')
  ds = create_dataset(_data_config(tmp_path), batch_size=3, eval_batch_size=3)
  images = next(ds.eval_batches())['image']  # sorted: alpha, grey.JPEG, grey
  assert images.shape == (3, SIZE, SIZE, 3)
  np.testing.assert_array_equal(images[0], np.broadcast_to([10, 20, 30],
                                                           (SIZE, SIZE, 3)))
  assert np.all(np.abs(images[1].astype(int) - 200) <= 2)  # JPEG is lossy
  np.testing.assert_array_equal(images[2], 100)


def test_images_already_at_image_size_pass_through_unchanged(tmp_path):
  noise = np.random.default_rng(0).integers(0, 256, (SIZE, SIZE, 3), np.uint8)
  for split in ('train', 'val'):
    os.makedirs(tmp_path / split / 'x')
    Image.fromarray(noise).save(tmp_path / split / 'x' / 'noise.png')
  ds = create_dataset(_data_config(tmp_path), batch_size=1, eval_batch_size=1)
  np.testing.assert_array_equal(next(ds.train_batches())['image'][0], noise)
  np.testing.assert_array_equal(next(ds.eval_batches())['image'][0], noise)


def test_files_that_are_not_jpeg_or_png_are_ignored(folder):
  (folder / 'train' / 'ant' / 'notes.txt').write_text('not an image')
  (folder / 'train' / 'ant' / '.hidden.png').write_bytes(b'')
  assert create_dataset(_data_config(folder)).num_train_examples == 9


# --- Class map --------------------------------------------------------------


def test_class_map_is_written_then_reused(folder, tmp_path_factory):
  path = tmp_path_factory.mktemp('workdir') / 'classes.json'
  create_dataset(_data_config(folder), class_map_path=str(path))
  assert json.loads(path.read_text()) == {'ant': 0, 'bee': 1, 'cat': 2}
  # A saved map wins over the sorted order, so labels stay stable.
  path.write_text(json.dumps({'cat': 0, 'bee': 1, 'ant': 2}))
  ds = create_dataset(_data_config(folder), class_map_path=str(path))
  assert ds.class_names == ['cat', 'bee', 'ant']
  batch = next(ds.eval_batches())
  ids = [_example_id(image) for image in batch['image']]
  assert list(batch['label']) == [2 if i < 11 else 1 for i in ids]  # ant, bee


def test_class_folders_that_differ_from_the_saved_map_raise_data_error(
    folder, tmp_path_factory):
  path = tmp_path_factory.mktemp('workdir') / 'classes.json'
  create_dataset(_data_config(folder), class_map_path=str(path))
  os.makedirs(folder / 'train' / 'dog')
  Image.new('RGB', (4, 4)).save(folder / 'train' / 'dog' / 'd.png')
  with pytest.raises(input_pipeline.DataError) as error:
    create_dataset(_data_config(folder), class_map_path=str(path))
  message = str(error.value)
  assert 'ant, bee, cat, dog' in message and 'ant, bee, cat)' in message
  assert str(path) in message and '\n' not in message


def test_eval_class_unknown_to_training_raises_data_error(folder):
  os.makedirs(folder / 'val' / 'dog')
  with pytest.raises(input_pipeline.DataError, match='dog'):
    create_dataset(_data_config(folder))


def test_split_without_images_raises_data_error(tmp_path):
  for name in ('a', 'b'):
    os.makedirs(tmp_path / 'train' / name)
    os.makedirs(tmp_path / 'val' / name)
    Image.new('RGB', (4, 4)).save(tmp_path / 'train' / name / '0.png')
  with pytest.raises(input_pipeline.DataError, match='no images in'):
    create_dataset(_data_config(tmp_path))


# --- Evaluation coverage ----------------------------------------------------


def _eval_ids(ds):
  batches = list(ds.eval_batches())
  assert len(batches) == ds.num_eval_batches
  ids = [_example_id(image) for b in batches
         for image, valid in zip(b['image'], b['mask']) if valid]
  labels = [l for b in batches for l, valid in zip(b['label'], b['mask'])
            if valid]
  return ids, labels, batches


def test_eval_covers_every_example_once_when_size_does_not_divide_batch(folder):
  ds = create_dataset(_data_config(folder), eval_batch_size=4)
  ids, labels, batches = _eval_ids(ds)
  assert ds.num_eval_batches == 2  # ceil(7 / 4)
  assert sorted(ids) == list(range(9, 16))  # the 7 eval ids, once each
  assert sorted(labels) == [0, 0, 1, 1, 1, 2, 2]
  assert [b['mask'].sum() for b in batches] == [4, 3]


def test_eval_over_two_processes_covers_every_example_once(folder):
  shards = [_eval_ids(create_dataset(_data_config(folder), eval_batch_size=4,
                              process_index=p, process_count=2))
            for p in range(2)]
  # SPMD: every process must run the same number of eval steps.
  assert len(shards[0][2]) == len(shards[1][2]) == 2
  ids = shards[0][0] + shards[1][0]
  assert sorted(ids) == list(range(9, 16))


# --- Training order: sharding and resume ------------------------------------


def test_epoch_order_is_a_permutation_that_depends_on_seed_and_epoch():
  stream = order.TrainOrder(num_examples=10, seed=3)
  epoch0 = stream.example_indices(np.arange(10))
  epoch1 = stream.example_indices(np.arange(10, 20))
  assert sorted(epoch0) == sorted(epoch1) == list(range(10))
  assert list(epoch0) != list(epoch1)
  other_seed = order.TrainOrder(num_examples=10, seed=4)
  assert list(other_seed.example_indices(np.arange(10))) != list(epoch0)


@pytest.mark.parametrize('augment', ['none', 'crop_flip'])
def test_two_processes_read_disjoint_halves_that_make_the_single_process_batch(
    folder, augment):
  data = _data_config(folder, augment=augment)
  whole = take(create_dataset(data, batch_size=8).train_batches(), 4)
  halves = [take(create_dataset(data, batch_size=8, process_index=p,
                          process_count=2).train_batches(), 4)
            for p in range(2)]
  for step in range(4):  # 4 steps of 8 cross three epochs of 9 examples
    for key in ('image', 'label'):
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][key], halves[1][step][key]]),
          whole[step][key])


@pytest.mark.parametrize('augment', ['none', 'flip', 'crop_flip'])
def test_resumed_stream_equals_uninterrupted_stream_bitwise(folder, augment):
  data = _data_config(folder, augment=augment)
  uninterrupted = take(create_dataset(data, seed=7).train_batches(), 6)
  resumed = take(create_dataset(data, seed=7).train_batches(start_step=3), 3)
  for expected, actual in zip(uninterrupted[3:], resumed):
    for key in ('image', 'label'):
      np.testing.assert_array_equal(actual[key], expected[key])


def test_crop_flip_moves_pixels_but_not_labels(folder):
  # Solid images hide crops and flips; give them a corner mark.
  for path in folder.glob('*/*/*.png'):
    array = np.asarray(Image.open(path)).copy()
    array[:5, :3] = 255
    Image.fromarray(array).save(path)
  plain = take(create_dataset(_data_config(folder)).train_batches(), 4)
  augmented = take(create_dataset(
      _data_config(folder, augment='crop_flip')).train_batches(), 4)
  for a, b in zip(plain, augmented):
    np.testing.assert_array_equal(a['label'], b['label'])
  assert not np.array_equal(
      np.concatenate([b['image'] for b in plain]),
      np.concatenate([b['image'] for b in augmented]))


def test_batch_size_not_divisible_by_process_count_raises_value_error(folder):
  with pytest.raises(ValueError, match='divisible'):
    create_dataset(_data_config(folder), batch_size=9, process_count=2)
  with pytest.raises(ValueError, match='divisible'):
    create_dataset(_data_config(folder), batch_size=8, eval_batch_size=3,
            process_count=2)


# --- Synthetic --------------------------------------------------------------


def _synthetic_config(**overrides):
  data = default.get_config().data
  data.update(dict(source='synthetic', image_size=SIZE,
                   num_synthetic_examples=10, num_synthetic_classes=5))
  data.update(overrides)
  return data


def test_synthetic_batches_are_a_pure_function_of_seed_and_step():
  ds = create_dataset(_synthetic_config(), batch_size=4, seed=1)
  batches = take(ds.train_batches(), 5)
  assert batches[0]['image'].shape == (4, SIZE, SIZE, 3)
  assert batches[0]['image'].dtype == np.uint8
  assert batches[0]['label'].dtype == np.int32
  assert ds.num_classes == 5 and batches[0]['label'].max() < 5
  resumed = next(create_dataset(_synthetic_config(), batch_size=4,
                         seed=1).train_batches(start_step=4))
  np.testing.assert_array_equal(resumed['image'], batches[4]['image'])
  other_seed = next(create_dataset(_synthetic_config(), batch_size=4,
                            seed=2).train_batches())
  assert not np.array_equal(other_seed['image'], batches[0]['image'])


def test_synthetic_eval_is_padded_and_masked_like_real_data():
  ds = create_dataset(_synthetic_config(), eval_batch_size=4)
  batches = list(ds.eval_batches())
  assert len(batches) == ds.num_eval_batches == 3
  assert sum(b['mask'].sum() for b in batches) == 10


# --- Shapes -----------------------------------------------------------------

_SMALL_SHAPES = dict(image_size=16, train_per_class=2, val_per_class=1)


def _read_tree(root):
  return {os.path.relpath(p, root): np.asarray(Image.open(p))
          for p in sorted(map(str, root.glob('*/*/*.png')))}


def test_shapes_generation_is_deterministic(tmp_path):
  first = _read_tree(pathlib.Path(
      shapes.ensure(str(tmp_path / 'a'), **_SMALL_SHAPES)))
  second = _read_tree(pathlib.Path(
      shapes.ensure(str(tmp_path / 'b'), **_SMALL_SHAPES)))
  assert len(first) == 10 * (2 + 1)
  assert first.keys() == second.keys()
  for name, image in first.items():
    assert image.shape == (16, 16, 3)
    np.testing.assert_array_equal(image, second[name])


def test_shapes_cache_lives_under_xdg_cache_home(monkeypatch, tmp_path):
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
  assert shapes.default_dir() == str(tmp_path / 'imagetrain' / 'shapes-v1')
  monkeypatch.delenv('XDG_CACHE_HOME')
  assert shapes.default_dir() == os.path.expanduser(
      '~/.cache/imagetrain/shapes-v1')


def test_shapes_cache_is_reused_not_regenerated(tmp_path, monkeypatch):
  root = shapes.ensure(str(tmp_path / 'shapes'), **_SMALL_SHAPES)
  monkeypatch.setattr(shapes, 'render', pytest.fail)
  assert shapes.ensure(root, **_SMALL_SHAPES) == root


def test_shapes_generation_that_fails_leaves_nothing_behind(
    tmp_path, monkeypatch):
  def crash(*args):
    raise OSError('disk full')
  monkeypatch.setattr(shapes, 'render', crash)
  with pytest.raises(OSError, match='disk full'):
    shapes.ensure(str(tmp_path / 'shapes'), **_SMALL_SHAPES)
  assert os.listdir(tmp_path) == []


def test_shapes_generation_keeps_the_copy_another_process_finished_first(
    tmp_path, monkeypatch):
  target = tmp_path / 'shapes'
  write_split = shapes._write_split

  def racing_write_split(root, split, *args):
    write_split(root, split, *args)
    if split == 'val':  # the other process renames its copy just before us
      os.makedirs(target / 'train')
      (target / 'theirs').write_text('')
  monkeypatch.setattr(shapes, '_write_split', racing_write_split)
  assert shapes.ensure(str(target), **_SMALL_SHAPES) == str(target)
  assert sorted(os.listdir(target)) == ['theirs', 'train']
  assert os.listdir(tmp_path) == ['shapes']  # our temporary copy is gone


def test_shapes_source_reads_the_generated_folder(tmp_path):
  root = shapes.ensure(str(tmp_path / 'shapes'), **_SMALL_SHAPES)
  data = _data_config(root, source='shapes', augment='crop_flip')
  ds = create_dataset(data, batch_size=4, eval_batch_size=4)
  assert ds.class_names == shapes.class_names() and ds.num_classes == 10
  assert (ds.num_train_examples, ds.num_eval_examples) == (20, 10)
  assert next(ds.train_batches())['image'].shape == (4, SIZE, SIZE, 3)


# --- check_data_config ------------------------------------------------------


def test_check_data_config_names_a_missing_folder_and_what_to_put_there(
    tmp_path):
  missing = tmp_path / 'nowhere'
  with pytest.raises(input_pipeline.DataError) as error:
    input_pipeline.check_data_config(_data_config(missing))
  assert str(missing) in str(error.value)
  assert 'train/<class>/*.jpg' in str(error.value)


def test_check_data_config_names_a_missing_split(folder):
  os.rename(folder / 'val', folder / 'test')
  with pytest.raises(input_pipeline.DataError, match=str(folder / 'val')):
    input_pipeline.check_data_config(_data_config(folder))


def test_check_data_config_asks_for_a_dir_for_folder_source():
  with pytest.raises(input_pipeline.DataError, match='needs data.dir'):
    input_pipeline.check_data_config(_data_config(''))


def test_check_data_config_accepts_an_absent_shapes_cache(tmp_path):
  input_pipeline.check_data_config(
      _data_config(tmp_path / 'not-yet', source='shapes'))


@pytest.mark.parametrize('key,value', [('source', 'imagenet'),
                                       ('augment', 'mixup'),
                                       ('image_size', 0)])
def test_check_data_config_rejects_unknown_values(folder, key, value):
  with pytest.raises(input_pipeline.DataError, match=key):
    input_pipeline.check_data_config(_data_config(folder, **{key: value}))


def test_package_import_and_check_load_neither_tensorflow_nor_jax():
  code = """
import sys
import input_pipeline
from configs import default
input_pipeline.check_data_config(default.get_config().data)
assert 'tensorflow' not in sys.modules and 'jax' not in sys.modules
"""
  root = pathlib.Path(__file__).resolve().parents[1]
  env = dict(os.environ, PYTHONPATH=str(root))
  subprocess.run([sys.executable, '-c', code], check=True, cwd=root, env=env)


def test_input_pipeline_imports_nothing_from_trainer_or_jax():
  # TensorFlow itself may import jax (tf.lite does); our own code must not.
  package = pathlib.Path(input_pipeline.__file__).parent
  for path in package.glob('*.py'):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom):
        names = [node.module or '']
      else:
        continue
      for name in names:
        assert name.split('.')[0] not in ('jax', 'trainer'), (path, name)
