"""RandAugment, random erasing, repeated augmentation (host) and CutMix
(device): what timm and DeiT do, drawn from (seed, position) or (seed, step)
so that a resumed run sees the same pixels."""

import json
import os
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageEnhance, ImageOps
import pytest

from configs import default
from core.errors import UsageError
import input_pipeline
from cli import validation
from input_pipeline import augmentation as augmentation_lib
from input_pipeline import example_seeds
from input_pipeline import host_augment
from input_pipeline import image_ops
from input_pipeline import order
from input_pipeline import preprocess
from input_pipeline import randaugment
from input_pipeline import random_erasing
from input_pipeline import repeated
from input_pipeline import stream as stream_lib
from input_pipeline.tf_setup import tf
from tests.helpers import run_main
from tests.test_end_to_end import tiny_run_flags
from trainer import step_functions
from trainer.engines.emulation import workers

SIZE = 32
ALL_ON = augmentation_lib.HostAugmentation(
    randaugment_num_ops=2, randaugment_magnitude=9.0,
    randaugment_magnitude_std=0.5, random_erasing_prob=0.25, repeats=3)


def _textured(seed: int, size: int = SIZE) -> np.ndarray:
  """Gradients plus noise, values well inside [0, 255]: every op shows."""
  y, x = np.mgrid[0:size, 0:size]
  image = np.stack([30 + 5 * x, 40 + 4 * y, 100 + 3 * (x + y) // 2], axis=-1)
  noise = np.random.default_rng(seed).normal(0, 10, image.shape)
  return np.clip(image + noise, 0, 255).astype(np.uint8)


# --- The operations ---------------------------------------------------------


@pytest.mark.parametrize('name', randaugment.NAMES)
def test_each_randaugment_op_changes_the_image_and_keeps_shape_and_dtype(name):
  image = tf.constant(_textured(0))
  for level in (9.0, -9.0):
    out = randaugment.OPS[name](image, tf.constant(level))
    assert out.shape == image.shape and out.dtype == tf.uint8
    assert np.mean(out.numpy() != image.numpy()) > 0.2, (name, level)


def test_randaugment_ops_compute_what_pillow_computes():
  """timm calls Pillow; pixel ops agree to one grey level, geometric ones
  differ only where a sample falls at the image's edge."""
  image = _textured(1)
  pil = Image.fromarray(image)
  t = tf.constant(image)
  fill = dict(resample=Image.BILINEAR, fillcolor=image_ops.FILL)
  point = [
      (image_ops.auto_contrast(t), ImageOps.autocontrast(pil)),
      (image_ops.equalize(t), ImageOps.equalize(pil)),
      (image_ops.invert(t), ImageOps.invert(pil)),
      (image_ops.posterize(t, tf.constant(2)), ImageOps.posterize(pil, 2)),
      (image_ops.solarize(t, tf.constant(100)), ImageOps.solarize(pil, 100)),
      (image_ops.solarize_add(t, tf.constant(80)), pil.point(
          [min(255, i + 80) if i < 128 else i for i in range(256)] * 3)),
  ]
  for factor in (0.19, 1.81):
    point += [(op(t, tf.constant(factor)), enhance(pil).enhance(factor))
              for op, enhance in ((image_ops.color, ImageEnhance.Color),
                                  (image_ops.contrast, ImageEnhance.Contrast),
                                  (image_ops.brightness, ImageEnhance.Brightness),
                                  (image_ops.sharpness, ImageEnhance.Sharpness))]
  for i, (ours, theirs) in enumerate(point):
    diff = np.abs(ours.numpy().astype(int) - np.asarray(theirs).astype(int))
    assert diff.max() <= 1, i
  geometric = [
      (image_ops.rotate(t, tf.constant(27.0)), pil.rotate(27.0, **fill)),
      (image_ops.shear_x(t, tf.constant(0.27)),
       pil.transform(pil.size, Image.AFFINE, (1, 0.27, 0, 0, 1, 0), **fill)),
      (image_ops.shear_y(t, tf.constant(-0.27)),
       pil.transform(pil.size, Image.AFFINE, (1, 0, 0, -0.27, 1, 0), **fill)),
      (image_ops.translate_x(t, tf.constant(12.8)),
       pil.transform(pil.size, Image.AFFINE, (1, 0, 12.8, 0, 1, 0), **fill)),
      (image_ops.translate_y(t, tf.constant(-9.6)),
       pil.transform(pil.size, Image.AFFINE, (1, 0, 0, 0, 1, -9.6), **fill)),
  ]
  for i, (ours, theirs) in enumerate(geometric):
    diff = np.abs(ours.numpy().astype(int) - np.asarray(theirs).astype(int))
    assert diff.mean() < 1.5 and np.median(diff) <= 1, i


def test_brightness_beyond_white_clips_instead_of_wrapping():
  out = image_ops.brightness(tf.constant(np.full((4, 4, 3), 200, np.uint8)),
                             tf.constant(1.9)).numpy()
  assert (out == 255).all()


def test_randaugment_draws_follow_timm():
  positions = np.arange(20000)
  fixed = randaugment.draw(3, positions, 2, 9.0, 0.0)
  ops, level = fixed['randaugment_op'], fixed['randaugment_level']
  assert ops.shape == level.shape == (20000, 2)
  applied = ops != randaugment.SKIP
  assert abs(applied.mean() - randaugment.APPLY_PROB) < 0.02
  counts = np.bincount(ops[applied], minlength=len(randaugment.NAMES))
  assert counts.min() > 0.8 * counts.mean()  # uniform over the 15
  np.testing.assert_array_equal(np.abs(level), 9.0)
  assert abs((level < 0).mean() - 0.5) < 0.02
  noisy = np.abs(randaugment.draw(3, positions, 2, 9.0, 0.5)['randaugment_level'])
  assert noisy.min() >= 0 and noisy.max() == randaugment.MAX_MAGNITUDE
  assert abs(noisy.mean() - 9.0) < 0.05 and 0.45 < noisy.std() < 0.5


def test_erasing_boxes_follow_timm_ranges():
  draws = random_erasing.draw(0, np.arange(20000), 224, 0.25)
  top, left, height, width = draws['erase_box'].T
  erased = height > 0
  assert abs(erased.mean() - 0.25) < 0.02
  assert (height[~erased] == 0).all() and (width[~erased] == 0).all()
  h, w = height[erased], width[erased]
  area = h * w / 224**2
  assert area.min() > 0.019 and area.max() < 0.34
  assert 0.29 < (h / w).min() and (h / w).max() < 3.45
  assert (top[erased] + h <= 224).all() and (left[erased] + w <= 224).all()
  assert not random_erasing.draw(0, np.arange(100), 224, 0.0)[
      'erase_box'].any()


def test_erasing_fills_the_box_with_noise_that_normalises_to_n01():
  image = np.full((SIZE, SIZE, 3), 7, np.uint8)
  box = tf.constant([4, 6, 20, 24], tf.int32)
  out = random_erasing.apply(tf.constant(image), box,
                             tf.constant([1, 2], tf.int64)).numpy()
  inside = np.zeros((SIZE, SIZE), bool)
  inside[4:24, 6:30] = True
  assert (out[~inside] == 7).all()
  normalised = np.asarray(step_functions.normalize_images(out[inside]))
  assert abs(normalised.mean()) < 0.1 and abs(normalised.std() - 0.95) < 0.07
  # The same seed gives the same noise; no box leaves the image as it is.
  again = random_erasing.apply(tf.constant(image), box,
                               tf.constant([1, 2], tf.int64)).numpy()
  np.testing.assert_array_equal(out, again)
  unchanged = random_erasing.apply(tf.constant(image), tf.zeros([4], tf.int32),
                                   tf.constant([1, 2], tf.int64)).numpy()
  np.testing.assert_array_equal(unchanged, image)


def test_erasing_noise_uses_the_device_normalisation():
  np.testing.assert_allclose(random_erasing.RGB_MEAN, step_functions.RGB_MEAN)
  np.testing.assert_allclose(random_erasing.RGB_STD, step_functions.RGB_STD)


def test_draws_are_a_pure_function_of_seed_and_position():
  def both(seed, positions):
    return host_augment.inputs(ALL_ON, seed, positions, SIZE)
  whole = both(5, np.arange(16))
  part = both(5, np.arange(8, 16))  # another process's share, or a resume
  for key, value in whole.items():
    np.testing.assert_array_equal(value[8:], part[key])
  other = both(6, np.arange(16))
  assert not np.array_equal(whole['randaugment_op'], other['randaugment_op'])
  assert not np.array_equal(whole['erase_seed'], other['erase_seed'])
  # Apart from each other and from the crop seeds.
  seeds, _ = example_seeds.crop_seeds_and_flips(5, np.arange(16))
  assert not np.array_equal(seeds, whole['erase_seed'])


def test_augmentation_off_adds_nothing_to_the_stream():
  assert host_augment.inputs(augmentation_lib.OFF, 0, np.arange(4), SIZE) == {}
  assert host_augment.spec(augmentation_lib.OFF, 4) == {}
  assert augmentation_lib.from_data_config(
      default.get_config().data) == augmentation_lib.OFF
  image = tf.constant(_textured(2))
  assert host_augment.apply(image, {}, augmentation_lib.OFF) is image


# --- Repeated augmentation --------------------------------------------------


@pytest.mark.parametrize('num_examples', [96, 100])
def test_repeated_order_shows_each_image_k_times_and_keeps_the_epoch_length(
    num_examples):
  batch, k = 24, 3
  rep = repeated.train_order(num_examples, 0, k, batch)
  epoch = rep.example_indices(np.arange(num_examples))
  assert len(epoch) == num_examples  # an epoch is as long as without it
  counts = np.bincount(epoch, minlength=num_examples)
  assert (counts > 0).sum() == -(-num_examples // k)
  if num_examples % (k * batch // k) == 0:
    assert set(counts[counts > 0]) == {k}
  else:
    assert counts.max() == k and counts[counts > 0].min() >= 1
  # The images are the start of the epoch's own permutation.
  first = order.TrainOrder(num_examples, 0).permutation(0)
  assert set(epoch) == set(first[:-(-num_examples // k)])
  # The next epoch is another permutation.
  assert not np.array_equal(
      rep.example_indices(np.arange(num_examples, 2 * num_examples)), epoch)


def test_repeated_copies_share_a_batch_but_not_neighbouring_slots():
  batch, k = 24, 3
  rep = repeated.train_order(96, 1, k, batch)
  for step in range(4):
    indices = rep.example_indices(order.train_positions(step, batch, 0, 1))
    assert set(np.bincount(indices)[np.unique(indices)]) == {k}
    assert (indices != np.roll(indices, 1)).all()  # mixup's partner
    # Copy c of every image in the c-th third of the batch: with k or more
    # devices, the copies of an image are on different ones.
    thirds = indices.reshape(k, batch // k)
    assert all(np.array_equal(thirds[0], t) for t in thirds[1:])


def test_repeated_order_splits_into_disjoint_process_shares():
  batch, k, processes = 24, 3, 4
  rep = repeated.train_order(96, 2, k, batch)
  for step in range(5):
    shares = [order.train_positions(step, batch, p, processes)
              for p in range(processes)]
    positions = np.concatenate(shares)
    assert len(set(positions.tolist())) == batch  # disjoint, all of the batch
    np.testing.assert_array_equal(
        np.concatenate([rep.example_indices(s) for s in shares]),
        rep.example_indices(order.train_positions(step, batch, 0, 1)))


def test_repeats_of_one_or_none_are_the_plain_order():
  for repeats in (0, 1):
    assert type(repeated.train_order(50, 0, repeats, 8)) is order.TrainOrder


# --- Through the data set ---------------------------------------------------


@pytest.fixture(scope='module')
def image_folder(tmp_path_factory):
  """2 classes of 12 textured 40 x 36 PNGs for training, 2 for evaluation."""
  root = tmp_path_factory.mktemp('augment_folder')
  for split, count in (('train', 12), ('val', 2)):
    for label in ('a', 'b'):
      os.makedirs(root / split / label)
      for i in range(count):
        image = _textured(100 * ord(label) + i, 40)[:, 2:38]
        Image.fromarray(image).save(root / split / label / f'{i}.png')
  return str(root)


def _dataset(folder, seed=0, **keys):
  data = default.get_config().data
  data.update(source='folder', dir=folder, image_size=SIZE,
              augment='crop_flip', prefetch_batches=0, **keys)
  return input_pipeline.create_dataset(data, batch_size=6, eval_batch_size=2,
                                       seed=seed)


DEIT_KEYS = dict(randaugment_num_ops=2, randaugment_magnitude=9.0,
                 randaugment_magnitude_std=0.5, random_erasing_prob=0.25,
                 repeated_augmentation=3)


def _take(dataset, start_step, steps):
  batches = dataset.train_batches(start_step)
  out = [next(batches) for _ in range(steps)]
  batches.close()
  return out


@pytest.fixture(scope='module')
def plain_run(image_folder):
  """(data set, its first 3 batches) with every key at its default, seed 4."""
  dataset = _dataset(image_folder, seed=4)
  return dataset, _take(dataset, 0, 3)


@pytest.fixture(scope='module')
def deit_run(image_folder):
  """(data set, its first 3 batches) with DeiT's keys, seed 4."""
  dataset = _dataset(image_folder, seed=4, **DEIT_KEYS)
  return dataset, _take(dataset, 0, 3)


def test_with_every_key_off_the_pixels_are_the_crop_and_flip_alone(plain_run):
  """What a run without these keys computes: the same stream inputs and, per
  position, crop_flip of the resized image, nothing more."""
  dataset, batches = plain_run
  assert dataset.augmentation == augmentation_lib.OFF
  stream = stream_lib.train_stream(dataset, 0, SIZE)
  assert set(stream.spec) == {'position', 'index', 'crop_seed', 'flip'}
  positions = order.train_positions(1, 6, 0, 1)
  indices = order.TrainOrder(dataset.num_train_examples, 4).example_indices(
      positions)
  for image, index, position in zip(batches[1]['image'], indices, positions):
    path = dataset.example_name('train', int(index))
    want = preprocess.augment(
        preprocess.resize(preprocess.decode(tf.constant(path)), SIZE),
        'crop_flip', tf.constant([4, position], tf.int64))
    np.testing.assert_array_equal(image, want.numpy())


def test_augmented_pixels_are_the_same_on_resume(image_folder, deit_run):
  dataset, run = deit_run
  assert dataset.augmentation == ALL_ON
  resumed = _take(_dataset(image_folder, seed=4, **DEIT_KEYS), 2, 1)[0]
  np.testing.assert_array_equal(resumed['image'], run[2]['image'])
  np.testing.assert_array_equal(resumed['label'], run[2]['label'])


def test_augmentation_changes_every_batch_and_keeps_uint8_images(
    plain_run, deit_run):
  for plain, augmented in zip(plain_run[1], deit_run[1]):
    assert augmented['image'].dtype == np.uint8
    assert augmented['image'].shape == (6, SIZE, SIZE, 3)
    assert not np.array_equal(augmented['image'], plain['image'])
  # Batch 0 holds 2 images, 3 copies each (repeated augmentation), every
  # copy augmented differently.
  first = deit_run[1][0]
  assert len({image.tobytes() for image in first['image']}) == 6


# --- CutMix and mixup on the device -----------------------------------------


def _distinct_batch(n=8, size=16, classes=8):
  images = jnp.broadcast_to(jnp.arange(n, dtype=jnp.float32)[:, None, None, None],
                            (n, size, size, 3))
  return images, jax.nn.one_hot(jnp.arange(n), classes)


def test_cutmix_label_weights_equal_the_pasted_area():
  images, targets = _distinct_batch()
  cutmix = jax.jit(lambda step: step_functions.cutmix(
      jax.random.fold_in(jax.random.key(0), step), images, targets, 1.0))
  own, partner = np.arange(8), (np.arange(8) - 1) % 8  # the roll's partner
  shares = []
  for step in range(12):
    mixed, mixed_targets = map(np.asarray, cutmix(step))
    mixed = mixed.reshape(8, -1)
    assert ((mixed == own[:, None]) | (mixed == partner[:, None])).all()
    pasted = (mixed == partner[:, None]).mean(axis=1)
    assert len(set(pasted)) == 1  # one box for the batch
    np.testing.assert_allclose(mixed_targets[own, partner], pasted, atol=1e-6)
    np.testing.assert_allclose(mixed_targets[own, own], 1 - pasted, atol=1e-6)
    shares.append(pasted[0])
  assert 0.1 < np.mean(shares) < 0.9 and len(set(shares)) > 6


def test_mixup_alone_is_unchanged_by_the_cutmix_keys():
  images, targets = _distinct_batch()
  rng = jax.random.key(3)
  want = step_functions.mixup(rng, images, targets, 0.8)
  got = step_functions.mix_batch(rng, images, targets, mixup_alpha=0.8,
                                 cutmix_alpha=0.0, switch_prob=0.5)
  for a, b in zip(want, got):
    np.testing.assert_array_equal(a, b)


def test_switch_prob_chooses_cutmix_or_mixup_per_batch():
  images, targets = _distinct_batch()
  def mix(rng, prob):
    return step_functions.mix_batch(rng, images, targets, mixup_alpha=0.8,
                                    cutmix_alpha=1.0, switch_prob=prob)
  rngs = [jax.random.fold_in(jax.random.key(0), s) for s in range(20)]
  for rng in rngs[:3]:
    np.testing.assert_array_equal(mix(rng, 1.0)[0], step_functions.cutmix(
        jax.random.fold_in(rng, 2), images, targets, 1.0)[0])
    np.testing.assert_array_equal(mix(rng, 0.0)[0], step_functions.mixup(
        rng, images, targets, 0.8)[0])
  # A cutmix batch holds only whole pixels of two images; a mixup batch not.
  kinds = [bool(jnp.all(jnp.isin(mix(rng, 0.5)[0], jnp.arange(8.0))))
           for rng in rngs]
  assert 3 < sum(kinds) < 17


class _Linear(nn.Module):
  """The smallest classifier compute_gradients takes."""
  num_classes: int = 8

  @nn.compact
  def __call__(self, x, train=False):
    del train
    return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


@pytest.fixture(scope='module')
def linear():
  """(model, params, batch of 8 distinct images)."""
  model = _Linear()
  images, _ = _distinct_batch()
  batch = {'image': images.astype(jnp.uint8), 'label': jnp.arange(8)}
  params = model.init(jax.random.key(0), images[:1])['params']
  return model, params, batch


def test_cutmix_in_the_step_is_a_function_of_seed_and_step(linear):
  model, params, batch = linear
  loss = jax.jit(lambda step: step_functions.compute_gradients(
      params, {}, batch, step, model=model, cutmix_alpha=1.0)[2]['loss'])
  unmixed = step_functions.compute_gradients(params, {}, batch, 5,
                                             model=model)[2]['loss']
  assert float(loss(5)) == float(loss(5))
  assert len({float(loss(5)), float(loss(6)), float(unmixed)}) == 3


def test_the_emulated_engines_workers_mix_with_the_configured_cutmix(linear):
  """The parameter-server and all-reduce engines' gradient code passes the
  CutMix keys through (SPMD's is the end-to-end run below)."""
  model, params, batch = linear
  config = default.get_config()
  config.update(mixup_alpha=0.8, cutmix_alpha=1.0, mixup_switch_prob=1.0)
  exp = types.SimpleNamespace(config=config, model=model)
  got = workers.local_gradients(exp)(params, {}, batch, 5)[2]['loss']
  want = step_functions.compute_gradients(
      params, {}, batch, 5, model=model, cutmix_alpha=1.0)[2]['loss']
  np.testing.assert_allclose(got, want, rtol=1e-6)


# --- Validation and the command line -----------------------------------------


@pytest.mark.parametrize('key,value', [
    ('data.randaugment_num_ops', -1),
    ('data.randaugment_magnitude', 10.5),
    ('data.randaugment_magnitude', -1.0),
    ('data.randaugment_magnitude', float('nan')),
    ('data.randaugment_magnitude_std', -0.5),
    ('data.random_erasing_prob', 1.5),
    ('data.random_erasing_prob', float('nan')),
    ('data.repeated_augmentation', -1),
    ('data.repeated_augmentation', 129),
    ('cutmix_alpha', -1.0),
    ('cutmix_alpha', float('inf')),
    ('mixup_switch_prob', 2.0),
])
def test_bad_augmentation_values_are_refused_in_one_line(key, value):
  config = default.get_config()
  section, _, name = key.rpartition('.')
  (config[section] if section else config)[name] = value
  with pytest.raises(UsageError, match=key.replace('.', r'\.')) as error:
    validation.check_config(config)
  assert '\n' not in str(error.value)


def test_deit_values_are_accepted():
  config = default.get_config()
  config.data.update(DEIT_KEYS)
  config.update(mixup_alpha=0.8, cutmix_alpha=1.0, mixup_switch_prob=0.5)
  validation.check_config(config)


def test_two_steps_with_every_augmentation_on_train_and_evaluate(
    tmp_path, image_folder):
  workdir = str(tmp_path / 'run')
  # This module's folder of textured images, not the shapes data set: no
  # image of it is checked, and it needs no generating.
  flags = tiny_run_flags(image_folder, num_train_steps=2, log_every_steps=1,
                         eval_every_steps=2, **{'checkpoint.every_steps': 2,
                                                'data.source': 'folder'},
                         **{'data.image_size': SIZE, 'mixup_alpha': 0.8,
                            'cutmix_alpha': 1.0,
                            **{f'data.{k}': v for k, v in DEIT_KEYS.items()}})
  result = run_main(f'--workdir={workdir}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  train = [r for r in records if r['split'] == 'train']
  assert [r['step'] for r in train] == [1, 2]
  assert all(np.isfinite(r['loss']) for r in train)
  assert any(r['split'] == 'eval' for r in records)
  bad = run_main(f'--workdir={tmp_path / "bad"}', *flags,
                 '--config.data.random_erasing_prob=2.0')
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1].startswith('error: ')
  assert 'data.random_erasing_prob' in bad.stderr.strip().splitlines()[-1]
