"""Starting a run from published weights (init.from_weights): a big_vision /
AugReg `.npz` ViT, a timm `.safetensors` (or `.npz`) ViT or ResNet, or a
Keras applications `.h5` VGG-16 or VGG-19.

The file's layout (init.weights_format, 'auto': from its extension and its
tensor names) turns its tensors into this model's parameters
(models/published/). Then, before anything is compiled or written:
  - every parameter and batch statistic of the model is filled exactly once;
  - every tensor of the file is used, or named as ignored in the log line
    (a batch count, the classifier under init.reset_head, an optimiser's
    state); any other is an error;
  - shapes match, but for the position embedding, resampled when the image
    size differs, and the classifier: re-initialised under init.reset_head,
    otherwise a class count that differs is an error.
Every failure is one line naming the tensor (UsageError, exit 2). The
arrays are read once on each process, then each device receives only its
own shards of each (jax.make_array_from_callback), whatever the mesh.
Optimiser state and the step start afresh, as with init.from_workdir.
"""

import os
import zipfile

from absl import logging
import jax
import numpy as np

from core.errors import UsageError
from models import registry
from models.published import big_vision
from models.published import common
from models.published import keras
from models.published import timm
from trainer import optim
from trainer import tree_paths

_LAYOUTS = {'big_vision': big_vision, 'timm': timm, 'keras': keras}
_KIND_NAMES = {'vit': 'ViT', 'resnet': 'ResNet', 'vgg': 'VGG'}
_HEAD = 'params/head/'
_POSITIONS = 'params/pos_embedding'


def _fail(config, message: str) -> UsageError:
  return UsageError(f'init.from_weights={config.init.from_weights}: {message}')


def _open(config):
  """(tensor names, read(name) -> array) of the file."""
  path = os.path.expanduser(config.init.from_weights)
  if not os.path.isfile(path):
    raise _fail(config, 'no such file')
  try:
    if path.endswith('.safetensors'):
      from safetensors import safe_open  # pylint: disable=g-import-not-at-top
      handle = safe_open(path, framework='np')
      return list(handle.keys()), handle.get_tensor
    if path.endswith('.npz'):
      handle = np.load(path, allow_pickle=False)
      return list(handle.files), lambda name: handle[name]
    if path.endswith('.h5'):  # Keras's, read whole (VGG's 528 MB at most)
      tensors = keras.read_h5(path)
      return list(tensors), tensors.__getitem__
  except Exception as e:  # pylint: disable=broad-except
    # zipfile, numpy and safetensors each raise their own on a bad file.
    raise _fail(config, f'cannot be read ({_first_line(e)})') from None
  raise _fail(config, 'is neither a .npz (big_vision or timm), a .safetensors '
              '(timm) nor a .h5 (Keras) file')


def _first_line(error: Exception) -> str:
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__


def _layout(config, names):
  if config.init.weights_format != 'auto':
    return _LAYOUTS[config.init.weights_format]
  for layout in (big_vision, timm, keras):
    if layout.recognises(names):
      return layout
  raise _fail(config, f'its tensors ({", ".join(sorted(names)[:3])}, ...) are in '
              'none of the big_vision, timm and Keras layouts')


def _kind(model_name: str) -> str | None:
  if registry.is_vit(model_name):
    return 'vit'
  return next((kind for kind in ('resnet', 'vgg') if model_name.startswith(kind)), None)


def load(abstract_state, config) -> dict:
  """{our path: array} for every parameter and batch statistic the file
  fills (the classifier's absent under init.reset_head); UsageError, with
  one line, for a file that does not fit this model."""
  names, read = _open(config)
  layout = _layout(config, names)
  kind, model = _kind(config.model.name), config.model.name
  if kind is None:
    raise _fail(config, f'model.name={model} has no published layout here (ViT, '
                'ResNet and VGG models do)')
  try:
    holds = layout.holds(names)
    if holds != kind:
      raise common.LayoutError(f'the file holds a {_KIND_NAMES[holds]}, but model.name={model}')
    ours = tree_paths.leaves_by_path({'params': abstract_state.params,
                                      'batch_stats': abstract_state.batch_stats})
    extra = {'num_heads': ours['params/encoderblock_0/attention/query/kernel'].shape[1]
             } if kind == 'vit' and layout is timm else {}
    converted = layout.to_ours(names, read, **extra)
  except common.LayoutError as e:
    raise _fail(config, str(e)) from None
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
    raise _fail(config, f'cannot be read ({_first_line(e)})') from None
  arrays = _fit(config, converted, ours)
  logging.info('Read %d arrays from %s (%s layout)%s', len(arrays), config.init.from_weights,
               layout.__name__.rsplit('.', 1)[-1], ''.join(
                   f'; ignored {name} ({why})' for name, why in converted.ignored.items()))
  return arrays


def _fit(config, converted: common.Converted, ours: dict) -> dict:
  """The converted arrays checked against the model's parameters."""
  assigned = dict(converted.assigned)
  pre_logits = [n for n, why in converted.ignored.items() if why == 'pre_logits']
  if config.init.reset_head:
    for path in [p for p in assigned if p.startswith(_HEAD)]:
      converted.ignored[assigned.pop(path)[0]] = 'the classifier: init.reset_head'
    for name in pre_logits:
      converted.ignored[name] = 'the representation layer before the classifier, which this ViT lacks'
  elif pre_logits:
    raise _fail(config, f'{pre_logits[0]}: a representation layer before the classifier '
                '(ImageNet-21k checkpoints), which this ViT lacks; set '
                'init.reset_head=true to fine-tune with a new classifier')
  for path, (source, array) in assigned.items():
    if path not in ours:
      raise _fail(config, f'{source} (our {path}) has no place in model.name='
                  f'{config.model.name} at this width and depth')
    want = tuple(ours[path].shape)
    if path == _POSITIONS and array.shape != want:
      array = common.resample_position_embedding(array, want[1], source)
    if tuple(array.shape) != want:
      hint = (' (a different number of classes? set init.reset_head=true)'
              if path.startswith(_HEAD) else '')
      raise _fail(config, f'{source} has shape {tuple(array.shape)} for our {path}, '
                  f'which has {want}{hint}')
    assigned[path] = (source, array.astype(ours[path].dtype))
  fresh_allowed = _HEAD if config.init.reset_head else None
  missing = sorted(p for p in ours if p not in assigned and not (
      fresh_allowed and p.startswith(fresh_allowed)))
  if missing:
    raise _fail(config, f'the file has nothing for our {missing[0]}'
                f'{f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""}')
  return {path: array for path, (_, array) in assigned.items()}


def initialize_from(state, arrays: dict):
  """`state` with the arrays `load` gave, each placed on its sharding (a
  device gets only its own shards); the rest (the classifier under
  init.reset_head) keeps its fresh initialisation."""
  def place(path, fresh):
    array = arrays.get(tree_paths.path_str(path))
    if array is None:
      return fresh
    return jax.make_array_from_callback(fresh.shape, fresh.sharding,
                                        lambda index: array[index])
  new = jax.tree_util.tree_map_with_path(
      place, {'params': state.params, 'batch_stats': state.batch_stats})
  # The moving average of the weights starts at the weights the run starts from.
  return state.replace(params=new['params'], batch_stats=new['batch_stats'],
                       opt_state=optim.with_ema_of(state.opt_state, new['params']))
