"""init.from_weights (trainer/init_weights.py, models/published/): published
ViT and ResNet weights give, in this project's models, the logits of
forward passes written from the formats' own names (tests/published_layouts.py);
every parameter is filled once, every tensor used or named as ignored, and
a file that does not fit is one line naming the tensor."""

import os

import flax
import jax
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy

from configs import default
from core.errors import UsageError
from models import registry
from models.published import big_vision
from models.published import keras
from models.published import timm
from tests import published_layouts as layouts
from trainer import init_weights
from trainer import tree_paths

# A tiny ViT-Ti/16: 64 wide (1 head: width // 64), 2 blocks, at 32 px (2 x 2 patches).
_VIT = dict(patch=16, width=64, mlp=256, depth=2, classes=5)


@flax.struct.dataclass
class _State:
  params: dict
  batch_stats: dict
  opt_state: tuple = ()


def _config(path, name, *, image_size=32, width=64, depth=2, gelu='tanh', reset_head=False):
  config = default.get_config()
  config.model.name, config.model.width, config.model.gelu = name, width, gelu
  config.model.depth = depth if registry.is_vit(name) else 0
  config.data.image_size = image_size
  config.init.from_weights, config.init.reset_head = str(path), reset_head
  return config


def _model(config, classes):
  extra = {'gelu': config.model.gelu} if registry.is_vit(config.model.name) else {}
  return registry.create_model(config.model.name, num_classes=classes, width=config.model.width,
                               depth=config.model.depth, image_size=config.data.image_size,
                               **extra)


def _fresh_state(config, classes):
  model = _model(config, classes)
  size = config.data.image_size
  variables = flax.linen.unbox(model.init(
      jax.random.key(0), np.zeros((1, size, size, 3), np.float32), train=False))
  return model, _State(variables['params'], variables.get('batch_stats', {}))


def _imported_logits(config, classes, images):
  model, state = _fresh_state(config, classes)
  state = init_weights.initialize_from(state, init_weights.load(state, config))
  return np.asarray(model.apply({'params': state.params, 'batch_stats': state.batch_stats},
                                images, train=False))


def _images(size, count=3):
  return np.random.default_rng(1).normal(0, 1, (count, size, size, 3)).astype(np.float32)


@pytest.mark.parametrize('naming', ['vision_transformer', 'big_vision', 'stacked'])
def test_an_augreg_vit_gives_big_visions_logits(tmp_path, naming):
  rng = np.random.default_rng(0)
  tensors = layouts.augreg_vit(rng, tokens_side=2, heads=1, naming=naming, **_VIT)
  path = tmp_path / 'vit.npz'
  # Saved with its optimiser, as big_vision's training states are.
  np.savez(path, **{f'opt/target/{k}': v for k, v in tensors.items()},
           **{'opt/state/momentum': np.zeros(3, np.float32), 'step': np.array(7)})
  reference = layouts.augreg_vit(np.random.default_rng(0), tokens_side=2, heads=1, **_VIT)
  ours = _imported_logits(_config(path, 'vit_ti16'), 5, _images(32))
  np.testing.assert_allclose(ours, layouts.augreg_vit_logits(reference, _images(32)),
                             rtol=1e-4, atol=1e-4)


def test_a_timm_vit_gives_timms_logits_with_the_exact_gelu(tmp_path):
  tensors = layouts.timm_vit(np.random.default_rng(0), tokens_side=2, **_VIT)
  path = tmp_path / 'vit.safetensors'
  safetensors_numpy.save_file(tensors, str(path))
  expected = layouts.timm_vit_logits(tensors, _images(32), heads=1)
  ours = _imported_logits(_config(path, 'vit_ti16', gelu='erf'), 5, _images(32))
  np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
  # The tanh approximation (big_vision's) is measurably not timm's model.
  approximate = _imported_logits(_config(path, 'vit_ti16', gelu='tanh'), 5, _images(32))
  assert np.abs(approximate - expected).max() > 1e-4


@pytest.mark.parametrize('name, blocks, bottleneck, suffix', [
    ('resnet18', (2, 2, 2, 2), False, '.safetensors'),
    ('resnet50', (3, 4, 6, 3), True, '.npz')])
def test_a_timm_resnet_gives_timms_logits_with_its_running_statistics(
    tmp_path, name, blocks, bottleneck, suffix):
  tensors = layouts.timm_resnet(np.random.default_rng(0), blocks=blocks, width=8,
                                bottleneck=bottleneck, classes=5)
  path = tmp_path / f'resnet{suffix}'
  if suffix == '.npz':
    np.savez(path, **tensors)
  else:
    safetensors_numpy.save_file(tensors, str(path))
  ours = _imported_logits(_config(path, name, image_size=32, width=8), 5, _images(32))
  np.testing.assert_allclose(ours, layouts.timm_resnet_logits(tensors, _images(32)),
                             rtol=1e-4, atol=1e-4)


def _published(layout_tensors, model_name, classes=1000, image_size=224):
  """(converted arrays, this model's parameter count) for a file of zeros in
  the published layout and size: the mapping alone, with no file."""
  shapes = {k: v.shape for k, v in layout_tensors.items()}
  read = lambda name: np.broadcast_to(np.float32(0), shapes[name])
  config = _config('-', model_name, image_size=image_size, width=0, depth=0)
  model = _model(config, classes)
  abstract = jax.eval_shape(lambda: flax.linen.unbox(model.init(
      jax.random.key(0), np.zeros((1, image_size, image_size, 3), np.float32), train=False)))
  state = _State(abstract['params'], abstract.get('batch_stats', {}))
  layout = next(l for l in (big_vision, timm, keras) if l.recognises(shapes))
  extra = ({'num_heads': 12} if layout is timm and registry.is_vit(model_name) else {})
  converted = layout.to_ours(list(shapes), read, **extra)
  ours = {'params/' + '/'.join(k): v for k, v in flax.traverse_util.flatten_dict(
      abstract['params']).items()}
  ours.update({'batch_stats/' + '/'.join(k): v for k, v in flax.traverse_util.flatten_dict(
      abstract.get('batch_stats', {})).items()})
  arrays = init_weights._fit(config, converted, ours)  # pylint: disable=protected-access
  return arrays, sum(a.size for p, a in arrays.items() if p.startswith('params/'))


def test_published_sizes_fill_every_parameter_and_count_as_published():
  zeros = lambda shape: np.broadcast_to(np.float32(0), shape)
  vit_b16 = layouts.augreg_vit(None, patch=16, tokens_side=14, width=768, heads=12,
                               mlp=3072, depth=12, classes=1000, make=zeros)
  assert _published(vit_b16, 'vit_b16')[1] == 86_567_656  # ViT-B/16, 86.6 M
  r50 = layouts.timm_resnet(None, blocks=(3, 4, 6, 3), width=64, bottleneck=True,
                            classes=1000, make=zeros)
  arrays, count = _published(r50, 'resnet50')
  assert count == 25_557_032  # ResNet-50, 25.6 M
  assert sum(1 for p in arrays if p.startswith('batch_stats/')) == 2 * 53  # every BN


def test_the_position_embedding_is_resampled_bilinearly_for_another_image_size(tmp_path):
  tensors = layouts.augreg_vit(np.random.default_rng(0), tokens_side=2, heads=1, **_VIT)
  path = tmp_path / 'vit.npz'
  np.savez(path, **tensors)
  config = _config(path, 'vit_ti16', image_size=64)  # a 4 x 4 grid from 2 x 2
  _, state = _fresh_state(config, 5)
  table = init_weights.load(state, config)['params/pos_embedding']
  grid = tensors['Transformer/posembed_input/pos_embedding'][0, 1:].reshape(2, 2, 64)
  np.testing.assert_array_equal(table[0, 0], tensors['Transformer/posembed_input/pos_embedding'][0, 0])
  np.testing.assert_allclose(table[0, 1:].reshape(4, 4, 64),
                             jax.image.resize(grid, (4, 4, 64), 'bilinear'), rtol=1e-6)


def test_reset_head_keeps_a_fresh_classifier_and_names_what_it_ignored(tmp_path, caplog):
  tensors = layouts.augreg_vit(np.random.default_rng(0), tokens_side=2, heads=1, **_VIT)
  tensors['pre_logits/kernel'] = np.zeros((64, 64), np.float32)  # ImageNet-21k's
  tensors['pre_logits/bias'] = np.zeros(64, np.float32)
  path = tmp_path / 'vit.npz'
  np.savez(path, **tensors)
  config = _config(path, 'vit_ti16', reset_head=True)
  _, state = _fresh_state(config, 7)  # 7 classes, not the file's 5
  with caplog.at_level('INFO'):
    arrays = init_weights.load(state, config)
  assert not [p for p in arrays if p.startswith('params/head/')]
  for name in ('head/kernel', 'head/bias', 'pre_logits/kernel', 'pre_logits/bias'):
    assert f'ignored {name} (' in caplog.text
  placed = init_weights.initialize_from(state, arrays)
  np.testing.assert_array_equal(placed.params['head']['kernel'], state.params['head']['kernel'])


def test_the_arrays_land_on_the_runs_shardings_each_device_its_own_shard():
  mesh = jax.make_mesh((8,), ('fsdp',), axis_types=(jax.sharding.AxisType.Explicit,))
  sharding = jax.sharding.NamedSharding(mesh, jax.P('fsdp', None))
  fresh = jax.device_put(np.zeros((16, 3), np.float32), sharding)
  wanted = np.arange(48, dtype=np.float32).reshape(16, 3)
  placed = init_weights.initialize_from(_State({'w': fresh}, {}), {'params/w': wanted})
  assert placed.params['w'].sharding == sharding
  for shard in placed.params['w'].addressable_shards:
    np.testing.assert_array_equal(shard.data, wanted[shard.index])


def _vit_file(tmp_path, change=None):
  tensors = layouts.augreg_vit(np.random.default_rng(0), tokens_side=2, heads=1, **_VIT)
  if change:
    change(tensors)
  path = tmp_path / 'vit.npz'
  np.savez(path, **tensors)
  return path


def _added(name: str, shape):
  """A change to _vit_file's tensors: one more, of ones."""
  return lambda tensors: tensors.update({name: np.ones(shape, np.float32)})


def _written(path, data: bytes):
  path.write_bytes(data)
  return path


def _truncated(tmp_path):
  path = _vit_file(tmp_path)
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])
  return path


def _resnet_file(tmp_path):
  path = tmp_path / 'r18.safetensors'
  safetensors_numpy.save_file(layouts.timm_resnet(
      np.random.default_rng(0), blocks=(2, 2, 2, 2), width=8, bottleneck=False, classes=5),
      str(path))
  return path


@pytest.mark.parametrize('make, name, message', [
    (_truncated, 'vit_ti16', r'cannot be read \('),
    (lambda d: d / 'none.npz', 'vit_ti16', 'no such file'),
    (lambda d: _written(d / 'vgg16.bin', b'HDF'), 'vit_ti16', 'is neither a .npz'),
    (lambda d: _written(d / 'vgg16.weights.h5', b'HDF'), 'vgg16', r'cannot be read \('),
    (_resnet_file, 'vit_ti16', 'the file holds a ResNet, but model.name=vit_ti16'),
    (_vit_file, 'resnet18', 'the file holds a ViT, but model.name=resnet18'),
    (_vit_file, 'vgg16', 'the file holds a ViT, but model.name=vgg16'),
    (_vit_file, 'alexnet', 'model.name=alexnet has no published layout here'),
    (lambda d: _vit_file(d, lambda t: t.pop('cls')), 'vit_ti16',
     'the file has nothing for our params/cls'),
    (lambda d: _vit_file(d, _added('Transformer/encoderblock_0/LayerNorm_9/scale', 64)),
     'vit_ti16', 'Transformer/encoderblock_0/LayerNorm_9/scale is no tensor of a big_vision ViT'),
    (lambda d: _vit_file(d, _added('Transformer/encoderblock_0/LayerNorm_1/scale', 64)),
     'vit_ti16', 'params/encoderblock_0/ln2/scale is filled twice'),
    (lambda d: _vit_file(d, _added('Transformer/encoderblock/LayerNorm_0/scale', (2, 64))),
     'vit_ti16', 'params/encoderblock_0/ln1/scale is filled twice'),
    (lambda d: _vit_file(d, _added('Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias', 5)),
     'vit_ti16', r'has shape \(5,\) for our params/encoderblock_0/mlp/fc1/bias, which has \(256,\)'),
    (lambda d: _vit_file(d, _added('Transformer/encoderblock_7/LayerNorm_0/scale', 64)),
     'vit_ti16', 'has no place in model.name=vit_ti16 at this width and depth'),
    (lambda d: _vit_file(d, _added('pre_logits/kernel', (64, 64))),
     'vit_ti16', 'pre_logits/kernel: a representation layer .* set init.reset_head=true'),
])
def test_a_file_that_does_not_fit_is_one_line_naming_it(tmp_path, make, name, message):
  path = make(tmp_path)
  config = _config(path, name, width=8 if name.startswith(('resnet', 'vgg')) else 64)
  if name in ('vgg16', 'alexnet'):
    state = _State({}, {})  # refused before the model's parameters are looked at
  else:
    _, state = _fresh_state(config, 5)
  with pytest.raises(UsageError, match=message) as raised:
    init_weights.load(state, config)
  assert str(raised.value).startswith(f'init.from_weights={path}: ')
  assert '\n' not in str(raised.value)


def test_another_class_count_without_reset_head_says_so(tmp_path):
  config = _config(_vit_file(tmp_path), 'vit_ti16')
  _, state = _fresh_state(config, 7)
  with pytest.raises(UsageError, match=r'head/kernel has shape \(64, 5\) .* \(64, 7\) \(a '
                     r'different number of classes\? set init.reset_head=true\)'):
    init_weights.load(state, config)


def test_weights_and_a_work_dir_together_are_refused():
  from trainer import loop_checks  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.init.from_weights, config.init.from_workdir = 'w.npz', 'runs/a'
  with pytest.raises(UsageError, match='a run starts from one of them'):
    loop_checks.check_start(config)
  config.init.from_workdir, config.init.weights_format = '', 'onnx'
  with pytest.raises(UsageError, match='init.weights_format'):
    loop_checks.check_start(config)


def test_a_run_starts_from_a_timm_resnet_and_a_bad_file_leaves_no_work_dir(tmp_path):
  from tests.helpers import run_main  # pylint: disable=g-import-not-at-top
  from tests.test_end_to_end import tiny_synthetic_run_flags  # pylint: disable=g-import-not-at-top
  from trainer import checkpointing  # pylint: disable=g-import-not-at-top
  tensors = layouts.timm_resnet(np.random.default_rng(0), blocks=(2, 2, 2, 2), width=4,
                                bottleneck=False, classes=10)
  path = tmp_path / 'r18.safetensors'
  safetensors_numpy.save_file(tensors, str(path))
  # A rate of 0: the saved step-1 parameters are the imported ones.
  flags = tiny_synthetic_run_flags(num_train_steps=1, log_every_steps=1, eval_every_steps=1,
                                   learning_rate=0, weight_decay=0)
  workdir = tmp_path / 'run'
  result = run_main(f'--workdir={workdir}', *flags, f'--config.init.from_weights={path}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert (f'Read 102 arrays from {path} (timm layout); ignored bn1.num_batches_tracked '
          '(a batch count that flax does not keep)') in result.stderr
  directory = os.path.join(workdir, 'checkpoints')
  target = {'params': {'stem_conv': {'kernel': jax.ShapeDtypeStruct(
      (7, 7, 3, 4), np.float32, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))}}}
  saved = checkpointing.restore_subset(directory, 1, target)
  np.testing.assert_array_equal(saved['params']['stem_conv']['kernel'],
                                tensors['conv1.weight'].transpose(2, 3, 1, 0))

  # The same file cut short: exit 2 with one line, and no work dir made.
  data = path.read_bytes()
  path.write_bytes(data[:len(data) - 100])
  fresh = tmp_path / 'fresh'
  result = run_main(f'--workdir={fresh}', *flags, f'--config.init.from_weights={path}')
  assert result.returncode == 2, result.stderr[-3000:]
  lines = [l for l in result.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and lines[0].startswith(
      f'error: init.from_weights={path}: cannot be read'), result.stderr[-2000:]
  assert not fresh.exists()



def test_gelu_is_a_vit_key_with_two_values():
  from models import checks  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.model.gelu = 'erf'  # the default model is resnet18
  with pytest.raises(UsageError, match="model.gelu='erf': only ViT models have a GELU"):
    checks.check_config(config)
  config.model.name, config.model.gelu = 'vit_ti16', 'exact'
  with pytest.raises(UsageError, match='model.gelu'):
    checks.check_config(config)


@pytest.mark.parametrize('name, layout', [('vit_ti16', big_vision), ('vit_ti16', timm),
                                          ('resnet50', timm)])
def test_our_parameters_written_out_read_back_bit_for_bit(name, layout):
  config = _config('-', name, width=64 if name.startswith('vit') else 8)
  _, state = _fresh_state(config, 5)
  rng = np.random.default_rng(0)
  ours = {p: rng.normal(0, 1, a.shape).astype(np.float32) for p, a in
          tree_paths.leaves_by_path({'params': state.params,
                                     'batch_stats': state.batch_stats}).items()}
  theirs = layout.from_ours(ours)
  extra = {'num_heads': 1} if layout is timm and name.startswith('vit') else {}
  back = layout.to_ours(list(theirs), theirs.__getitem__, **extra)
  assert set(back.assigned) == set(ours)
  for path, (_, array) in back.assigned.items():
    assert array.dtype == np.float32 and np.array_equal(array, ours[path]), path
  # What was written is the format's own model: its forward pass gives ours.
  config.model.gelu = 'erf' if layout is timm else 'tanh'
  model = _model(config, 5)
  variables = tree_paths.tree_from_paths(
      {p: a * (0.2 if p.startswith('params/') else 1) for p, a in ours.items()})
  if 'batch_stats' in variables:  # positive running variances
    variables['batch_stats'] = jax.tree.map(lambda v: np.abs(v) + 0.5,
                                            variables['batch_stats'])
  flat = tree_paths.leaves_by_path(variables)
  logits = np.asarray(model.apply(variables, _images(32), train=False))
  if layout is big_vision:
    expected = layouts.augreg_vit_logits(big_vision.from_ours(flat), _images(32))
  elif name.startswith('vit'):
    expected = layouts.timm_vit_logits(timm.from_ours(flat), _images(32), heads=1)
  else:
    expected = layouts.timm_resnet_logits(timm.from_ours(flat), _images(32))
  np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def _keras_vgg16(width: int, classes: int):
  """keras.applications.VGG16's layers and names, `width` channels first
  (64 published), hidden FC layers of width * 64; logits out."""
  import keras  # pylint: disable=g-import-not-at-top
  if width == 64:
    return keras.applications.VGG16(weights=None, classes=classes,
                                    classifier_activation=None)
  x = inputs = keras.Input((224, 224, 3))
  for stage, convs in enumerate((2, 2, 3, 3, 3), start=1):
    for i in range(1, convs + 1):
      x = keras.layers.Conv2D(min(width * 2 ** (stage - 1), width * 8), 3, padding='same',
                              activation='relu', name=f'block{stage}_conv{i}')(x)
    x = keras.layers.MaxPooling2D(2, name=f'block{stage}_pool')(x)
  x = keras.layers.Flatten(name='flatten')(x)
  x = keras.layers.Dense(width * 64, activation='relu', name='fc1')(x)
  x = keras.layers.Dense(width * 64, activation='relu', name='fc2')(x)
  return keras.Model(inputs, keras.layers.Dense(classes, name='predictions')(x))


def test_a_keras_vgg16_gives_keras_logits_from_either_of_its_files(tmp_path):
  """A narrow VGG16 in keras.applications' layers and names, saved as the
  published .h5 files are (Keras 2's layout) and by Keras 3: both read as
  the same tensors, and Keras computes the reference logits."""
  import h5py  # pylint: disable=g-import-not-at-top
  from keras.src.legacy.saving import legacy_h5_format  # pylint: disable=g-import-not-at-top
  model = _keras_vgg16(4, 5)
  legacy = tmp_path / 'vgg16_weights_tf_dim_ordering_tf_kernels.h5'
  with h5py.File(legacy, 'w') as f:
    legacy_h5_format.save_weights_to_hdf5_group(f, model)
  current = tmp_path / 'vgg16.weights.h5'
  model.save_weights(str(current))
  old, new = keras.read_h5(str(legacy)), keras.read_h5(str(current))
  assert set(old) == set(new) and len(old) == 2 * 16  # 13 convs and 3 dense layers
  assert all(np.array_equal(old[name], new[name]) for name in old)
  images = np.random.default_rng(2).normal(0, 1, (1, 224, 224, 3)).astype(np.float32)
  expected = np.asarray(model(images))
  ours = _imported_logits(_config(legacy, 'vgg16', image_size=224, width=4), 5, images)
  np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_keras_vgg16_at_its_published_size_fills_every_parameter():
  """keras.applications.VGG16's own weights' names and shapes (138.4 M
  parameters), mapped without a file."""
  model = _keras_vgg16(64, 1000)
  tensors = {}
  for layer in model.layers:
    for leaf, weight in zip(('kernel', 'bias'), layer.weights):
      tensors[f'{layer.name}/{leaf}'] = np.broadcast_to(np.float32(0), weight.shape)
  assert sum(a.size for a in tensors.values()) == model.count_params() == 138_357_544
  assert _published(tensors, 'vgg16')[1] == 138_357_544
