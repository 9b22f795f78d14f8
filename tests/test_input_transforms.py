"""Specification of the ImageNet transforms, the seeds, and the record index."""

import io
import itertools
import os
import struct

import numpy as np
from PIL import Image
import pytest

from configs import default
import input_pipeline
from input_pipeline import example_seeds


def _encode(array: np.ndarray, fmt: str = 'JPEG') -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(array).save(buffer, fmt, quality=95)
  return buffer.getvalue()


def _gradient(height: int, width: int) -> np.ndarray:
  """Red grows down the rows, green along the columns: position is visible."""
  rows = np.linspace(0, 255, height)[:, None].repeat(width, 1)
  cols = np.linspace(0, 255, width)[None, :].repeat(height, 0)
  return np.stack([rows, cols, np.full_like(rows, 128)], -1).astype(np.uint8)


@pytest.fixture(scope='module')
def tf_crops():
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import crops
  from input_pipeline.tf_setup import tf
  return crops, tf


def test_center_crop_window_matches_resize_then_central_crop(tf_crops):
  crops, _ = tf_crops
  # 500x375 at 224: shorter side 375 -> 256 px, central 224 = 328 source px.
  window = crops.center_crop_window(375, 500, 0.875).numpy().tolist()
  assert window == [24, 86, 328, 328]
  assert crops.center_crop_window(7, 7, 1.0).numpy().tolist() == [0, 0, 7, 7]


@pytest.mark.parametrize('fmt', ['JPEG', 'PNG'])
def test_center_crop_keeps_the_middle_of_the_image(tf_crops, fmt):
  crops, tf = tf_crops
  image = _gradient(60, 80)
  out = crops.center_crop(tf.constant(_encode(image, fmt)), 16, 0.5).numpy()
  assert out.shape == (16, 16, 3) and out.dtype == np.uint8
  # The central 30x30 of a 60x80 gradient: red 25%-75%, green 31%-69%.
  assert 50 < out[..., 0].min() and out[..., 0].max() < 205
  assert 70 < out[..., 1].min() and out[..., 1].max() < 185


def test_image_already_at_size_passes_the_eval_crop_unchanged(tf_crops):
  crops, tf = tf_crops
  noise = np.random.default_rng(0).integers(0, 256, (16, 16, 3), np.uint8)
  out = crops.center_crop(tf.constant(_encode(noise, 'PNG')), 16, 1.0)
  np.testing.assert_array_equal(out.numpy(), noise)


def test_inception_crop_is_a_pure_function_of_its_seed(tf_crops):
  crops, tf = tf_crops
  encoded = tf.constant(_encode(_gradient(90, 120)))
  crop = lambda seed, flip: crops.inception_crop(
      encoded, 24, tf.constant(seed, tf.int64), tf.constant(flip),
      jpeg_only=True).numpy()
  first = crop([1, 2], False)
  assert first.shape == (24, 24, 3) and first.dtype == np.uint8
  np.testing.assert_array_equal(crop([1, 2], False), first)
  assert not np.array_equal(crop([3, 4], False), first)
  np.testing.assert_array_equal(crop([1, 2], True), first[:, ::-1])


def test_inception_crops_cover_8_to_100_percent_of_the_area(tf_crops):
  crops, tf = tf_crops
  # The green channel spans the columns: the spread of a crop's green values
  # is its width as a fraction of the image's.
  encoded = tf.constant(_encode(_gradient(200, 200), 'PNG'))
  widths = []
  for i in range(40):
    out = crops.inception_crop(encoded, 32, tf.constant([i, 0], tf.int64),
                               tf.constant(False)).numpy()
    widths.append((int(out[..., 1].max()) - int(out[..., 1].min())) / 255)
  # Area 8%-100% and aspect 3/4-4/3 bound the width to about 24%-100%.
  assert min(widths) > 0.2 and max(widths) <= 1.0
  assert max(widths) - min(widths) > 0.3  # crops really vary


def test_snapped_crop_moves_only_the_left_edge_onto_the_block_grid(tf_crops):
  crops, tf = tf_crops
  moved = 0
  for i in range(200):
    seed = tf.constant([i, 7], tf.int64)
    exact = crops.inception_window(375, 500, seed).numpy()
    snapped = crops.inception_window(375, 500, seed, True).numpy()
    top, left, height, width = snapped
    assert left % crops.JPEG_BLOCK_COLUMNS == 0
    assert 0 <= exact[1] - left < crops.JPEG_BLOCK_COLUMNS
    assert (top, height, width) == (exact[0], exact[2], exact[3])
    assert left + width <= 500
    moved += int(left != exact[1])
  assert moved > 150  # most crops do start off the grid


def test_tensorflow_decodes_jpeg_with_the_fast_integer_dct_by_default(tf_crops):
  # docs/input-speed.md counts on it: dct_method='INTEGER_FAST' saves nothing.
  _, tf = tf_crops
  rng = np.random.default_rng(0)
  encoded = _encode(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
  default_dct = tf.io.decode_jpeg(encoded, channels=3).numpy()
  np.testing.assert_array_equal(
      tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_FAST').numpy(), default_dct)
  accurate = tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE').numpy()
  assert not np.array_equal(accurate, default_dct)


def test_scaled_window_covers_the_same_region_inside_the_scaled_image(tf_crops):
  crops, tf = tf_crops
  height, width = 375, 500
  for i in range(100):
    window = crops.inception_window(height, width, tf.constant([i, 3], tf.int64), True)
    top, left, h, w = window.numpy()
    for ratio in (1, 2, 4, 8):
      s_top, s_left, s_h, s_w = crops.scaled_window(window, height, width, ratio).numpy()
      # Widened outwards to whole scaled pixels: the region, and less than
      # one scaled pixel more on each side.
      assert s_top * ratio <= top < (s_top + 1) * ratio
      assert s_left * ratio <= left < (s_left + 1) * ratio
      assert top + h <= (s_top + s_h) * ratio < top + h + ratio or (
          s_top + s_h == -(-height // ratio))
      assert left + w <= (s_left + s_w) * ratio < left + w + ratio or (
          s_left + s_w == -(-width // ratio))
      # Inside libjpeg's scaled image, ceil(side / ratio).
      assert s_top + s_h <= -(-height // ratio) and s_left + s_w <= -(-width // ratio)


@pytest.mark.parametrize('crop_side,size,ratio', [
    (100, 64, 1), (127, 64, 1), (128, 64, 2), (255, 64, 2), (256, 64, 4),
    (511, 64, 4), (512, 64, 8), (4000, 64, 8), (300, 224, 1), (448, 224, 2)])
def test_scaled_decode_picks_the_largest_ratio_that_keeps_the_output_size(
    tf_crops, crop_side, size, ratio):
  crops, tf = tf_crops
  window = tf.constant([0, 0, crop_side, crop_side + 50], tf.int32)
  assert (1, 2, 4, 8)[int(crops.decode_ratio_index(window, size))] == ratio
  # The shorter side decides.
  tall = tf.constant([0, 0, crop_side + 50, crop_side], tf.int32)
  assert (1, 2, 4, 8)[int(crops.decode_ratio_index(tall, size))] == ratio


def test_the_scaled_decode_stays_close_to_the_exact_one(tf_crops):
  crops, tf = tf_crops
  encoded = tf.constant(_encode(_gradient(480, 640)))
  scaled = crops.JpegDecoding(scaled_to=24)
  for i in range(6):
    seed = tf.constant([i, 9], tf.int64)
    crop = lambda decoding: crops.inception_crop(
        encoded, 24, seed, tf.constant(False), jpeg_only=True, snap_to_blocks=True,
        decoding=decoding).numpy().astype(int)
    exact = crop(crops.EXACT)
    # A smooth image: the region's pixels are the same within a few levels.
    assert np.abs(crop(scaled) - exact).mean() < 3
    np.testing.assert_array_equal(crop(scaled), crop(scaled))  # a pure function
  # A crop too small to scale decodes exactly as before.
  small = crops.JpegDecoding(scaled_to=480)
  seed = tf.constant([0, 9], tf.int64)
  np.testing.assert_array_equal(
      crops.inception_crop(encoded, 24, seed, tf.constant(False), jpeg_only=True,
                           decoding=small).numpy(),
      crops.inception_crop(encoded, 24, seed, tf.constant(False), jpeg_only=True).numpy())


def test_snapped_crop_decodes_the_pixels_of_its_window(tf_crops):
  crops, tf = tf_crops
  image = _gradient(120, 160)
  encoded = tf.constant(_encode(image))
  seed = tf.constant([5, 1], tf.int64)
  top, left, height, width = crops.inception_window(120, 160, seed,
                                                    True).numpy()
  via_crop = crops.inception_crop(encoded, 24, seed, tf.constant(False),
                                  jpeg_only=True, snap_to_blocks=True)
  whole = tf.io.decode_jpeg(encoded, channels=3)
  resize = crops._resize  # pylint: disable=protected-access
  via_slice = resize(whole[top:top + height, left:left + width], 24)
  # Within one grey level: libjpeg's chroma upsampling at the edges of a
  # cropped decode differs slightly from a whole decode.
  np.testing.assert_allclose(via_crop.numpy(), via_slice.numpy(), atol=1)
  shifted = resize(whole[top:top + height, left + 4:left + 4 + width], 24)
  assert np.abs(via_crop.numpy().astype(int) - shifted.numpy()).max() > 1


def test_example_seeds_depend_on_seed_and_position_only():
  positions = np.arange(1000)
  seeds, flips = example_seeds.crop_seeds_and_flips(3, positions)
  again, flips_again = example_seeds.crop_seeds_and_flips(3, positions[500:])
  np.testing.assert_array_equal(again, seeds[500:])
  np.testing.assert_array_equal(flips_again, flips[500:])
  assert seeds.dtype == np.int64 and (seeds >= 0).all()
  assert len({tuple(s) for s in seeds}) == 1000
  assert 400 < flips.sum() < 600
  other, _ = example_seeds.crop_seeds_and_flips(4, positions)
  assert not (other == seeds).all(axis=1).any()


# --- The TFRecord index -------------------------------------------------------


def _write_tfrecord(path, records):
  """A real TFRecord file, written by TensorFlow (with its CRCs)."""
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def test_tfrecord_index_reads_records_by_index_across_shards(tmp_path):
  from input_pipeline import tfrecord_index  # pylint: disable=g-import-not-at-top
  records = [f'record-{i}'.encode() * (i + 1) for i in range(10)]
  _write_tfrecord(tmp_path / 'a', records[:6])
  _write_tfrecord(tmp_path / 'b', records[6:])
  index = tfrecord_index.TFRecordIndex([
      tfrecord_index.Shard(str(tmp_path / 'a'), skip=1, take=5),
      tfrecord_index.Shard(str(tmp_path / 'b'), skip=0, take=4)])
  assert len(index) == 9
  assert index.__getitems__([8, 0, 5, 4]) == [records[9], records[1],
                                              records[6], records[5]]
  with pytest.raises(IndexError):
    index[9]


def test_tfrecord_index_is_stored_beside_the_file_once_and_rescanned_if_stale(
    tmp_path, monkeypatch):
  from input_pipeline import tfrecord_index  # pylint: disable=g-import-not-at-top
  records = [f'r{i}'.encode() * (i + 1) for i in range(5)]
  _write_tfrecord(tmp_path / 'a', records)
  shard = [tfrecord_index.Shard(str(tmp_path / 'a'), skip=0, take=5)]
  assert tfrecord_index.TFRecordIndex(shard).__getitems__([4, 1]) == [records[4], records[1]]
  assert (tmp_path / 'a.offsets.npz').exists()
  assert not [p for p in tmp_path.iterdir() if '.tmp-' in p.name]

  # A later run (another process) reads the stored offsets: no scan.
  def no_scan(*_):
    raise AssertionError('scanned although the index is stored')
  monkeypatch.setattr(tfrecord_index, 'scan_offsets', no_scan)
  assert tfrecord_index.TFRecordIndex(shard).__getitems__([3]) == [records[3]]

  # The file is rewritten with other records: its size differs, so it is
  # scanned again rather than read at stale offsets.
  monkeypatch.undo()
  _write_tfrecord(tmp_path / 'a', [b'new'] + records[:4])
  assert tfrecord_index.TFRecordIndex(shard).__getitems__([0, 4]) == [b'new', records[3]]


def test_tfrecord_index_reads_a_truncated_file_as_empty_records(tmp_path):
  from input_pipeline import tfrecord_index  # pylint: disable=g-import-not-at-top
  _write_tfrecord(tmp_path / 'a', [b'x' * 10, b'y' * 10])
  with open(tmp_path / 'a', 'r+b') as f:
    f.truncate(30)  # the second record's header is cut
  index = tfrecord_index.TFRecordIndex(
      [tfrecord_index.Shard(str(tmp_path / 'a'), skip=0, take=2)])
  assert index.__getitems__([0, 1]) == [b'x' * 10, b'']


def _header_offset(records, i):
  """Where record i's header starts (12-byte header, 4-byte footer each)."""
  return sum(12 + len(r) + 4 for r in records[:i])


@pytest.mark.parametrize('length', [2**64 - 1, 7], ids=['huge', 'plausible'])
def test_a_corrupt_record_header_is_found_once_and_ends_the_readable_records(
    tmp_path, monkeypatch, length):
  from input_pipeline import tfrecord_index  # pylint: disable=g-import-not-at-top
  records = [f'record-{i}'.encode() * 3 for i in range(5)]
  path = tmp_path / 'a'
  _write_tfrecord(path, records)
  with open(path, 'r+b') as f:  # record 2's length, its CRC left as it was
    f.seek(_header_offset(records, 2))
    f.write(struct.pack('<Q', length))
  scans, warnings = [], []
  scan = tfrecord_index.scan_offsets
  monkeypatch.setattr(tfrecord_index, 'scan_offsets',
                      lambda *a: scans.append(a) or scan(*a))
  monkeypatch.setattr(tfrecord_index.logging, 'warning',
                      lambda *a: warnings.append(a[0] % a[1:]))
  index = tfrecord_index.TFRecordIndex(
      [tfrecord_index.Shard(str(path), skip=0, take=5)])

  for _ in range(3):  # steps: the file is scanned and named once, not per read
    assert index.__getitems__([4, 0, 2, 1, 3]) == [
        b'', records[0], b'', records[1], b'']
    assert index[1] == records[1] and index[3] == b''
  assert len(scans) == 1
  assert len(warnings) == 1 and str(path) in warnings[0]
  assert 'record 2 fails its CRC' in warnings[0]
  # The stored index keeps the finding: a later run neither scans nor reads
  # past the corruption, and still names the file.
  again = tfrecord_index.TFRecordIndex(
      [tfrecord_index.Shard(str(path), skip=0, take=5)])
  assert again.__getitems__([1, 2]) == [records[1], b'']
  assert len(scans) == 1 and len(warnings) == 2


def test_a_record_index_stored_before_headers_were_checked_is_rescanned(tmp_path):
  from input_pipeline import tfrecord_index  # pylint: disable=g-import-not-at-top
  records = [b'a' * 5, b'b' * 5]
  path = tmp_path / 'a'
  _write_tfrecord(path, records)
  with open(path, 'r+b') as f:
    f.seek(_header_offset(records, 1))
    f.write(struct.pack('<Q', 3))  # a wrong length whose CRC fails
  # The old format: offsets, lengths and file size, no corrupt_at.
  np.savez(str(path) + tfrecord_index.SIDECAR_SUFFIX,
           offsets=np.array([12, 33]), lengths=np.array([5, 3]),
           file_size=np.int64(os.path.getsize(path)))
  index = tfrecord_index.TFRecordIndex(
      [tfrecord_index.Shard(str(path), skip=0, take=2)])
  assert index.__getitems__([0, 1]) == [records[0], b'']


# --- Folders of files share the bad-data handling -----------------------------


def _folder(root, corrupt: dict):
  for split, count in (('train', 8), ('val', 5)):
    os.makedirs(root / split / 'a')
    for i in range(count):
      (root / split / 'a' / f'{i}.jpg').write_bytes(
          _encode(np.full((12, 12, 3), 10 * i, np.uint8)))
  for split, name in corrupt.items():
    (root / split / 'a' / name).write_bytes(b'\xff\xd8\xff garbage')


@pytest.mark.parametrize('augment', ['none', 'inception_crop'])
def test_folder_source_skips_and_counts_a_corrupt_jpeg(tmp_path, augment):
  _folder(tmp_path, {'train': '3.jpg', 'val': '2.jpg'})
  data = default.get_config().data
  data.update(dict(source='folder', dir=str(tmp_path), image_size=8,
                   augment=augment))
  ds = input_pipeline.create_dataset(data, batch_size=4, eval_batch_size=4,
                                     seed=0)
  epoch = list(itertools.islice(ds.train_batches(), 2))
  assert all(b['image'].shape == (4, 8, 8, 3) for b in epoch)
  assert ds.skipped_counts()['train'] == 1
  evaluation = list(ds.eval_batches())
  assert sum(int(b['mask'].sum()) for b in evaluation) == 4
  assert ds.skipped_counts()['eval'] == 1


# --- Regrouping by step after failures ----------------------------------------


def _stream(values: np.ndarray, split: str, skipped: dict):
  """Steps of examples whose 'image' is their value; negative ones fail."""
  # pylint: disable-next=g-import-not-at-top
  from input_pipeline import step_batches
  from input_pipeline import stream
  from input_pipeline.tf_setup import tf
  local = values.shape[1]
  spec = {'value': tf.TensorSpec([local], tf.int64),
          'index': tf.TensorSpec([local], tf.int64)}
  if split == 'eval':
    spec['mask'] = tf.TensorSpec([local], tf.bool)

  def inputs(i):
    step = {'value': values[i], 'index': np.arange(local) + i * local}
    if split == 'eval':
      step['mask'] = np.ones(local, bool)
    return step

  def load(example):
    check = tf.debugging.assert_non_negative(example['value'])
    with tf.control_dependencies([check]):
      pixel = tf.cast(example['value'], tf.uint8)
    return {'image': tf.fill([1, 1, 3], pixel), 'label': tf.constant(0)}

  return list(step_batches.batches(
      stream.Stream(inputs, spec, count=len(values)), load, split=split,
      local_batch=local, image_size=1, prefetch=0, skipped=skipped))


def test_one_failure_in_a_chunk_loses_only_that_example():
  # 8 examples are one chunk: the failure drops the chunk in tf.data, and the
  # seven readable examples are decoded again on their own.
  skipped = {'train': 0, 'eval': 0}
  values = np.array([[1, 2, 3, -1, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16],
                     [-1, 18, 19, 20, 21, 22, 23, -1]])
  batches = _stream(values, 'eval', skipped)
  assert [b['image'][:, 0, 0, 0].tolist() for b in batches] == [
      [1, 2, 3, 0, 5, 6, 7, 8], list(range(9, 17)), [0] + list(range(18, 24))
      + [0]]
  assert [b['mask'].tolist() for b in batches] == [
      [True] * 3 + [False] + [True] * 4, [True] * 8, [False] + [True] * 6
      + [False]]
  assert skipped['eval'] == 3


def test_eval_step_with_no_readable_example_is_all_masked_and_counted():
  skipped = {'train': 0, 'eval': 0}
  values = np.array([[1, -1, 2], [-1, -1, -1], [3, 4, -1]])
  batches = _stream(values, 'eval', skipped)
  assert len(batches) == 3
  assert [b['mask'].tolist() for b in batches] == [
      [True, False, True], [False, False, False], [True, True, False]]
  assert batches[0]['image'][:, 0, 0, 0].tolist() == [1, 0, 2]
  assert batches[2]['image'][:, 0, 0, 0].tolist() == [3, 4, 0]
  assert skipped['eval'] == 5


def test_train_step_repeats_its_readable_examples_in_failed_slots():
  skipped = {'train': 0, 'eval': 0}
  batches = _stream(np.array([[5, -1, 6, -1], [7, 8, 9, 10]]), 'train',
                    skipped)
  assert [b['image'][:, 0, 0, 0].tolist() for b in batches] == [
      [5, 6, 5, 6], [7, 8, 9, 10]]
  assert skipped['train'] == 2


def test_train_step_with_no_readable_example_raises_data_error():
  with pytest.raises(input_pipeline.DataError, match='training step'):
    _stream(np.array([[1, 2], [-1, -1]]), 'train', {'train': 0, 'eval': 0})
