"""Keras applications' VGG-16 and VGG-19 weights (`.h5`, `.weights.h5`).

keras.applications names VGG's layers block{S}_conv{I}, fc1, fc2 and
predictions, each with a kernel (Keras's layout is flax's: [kh, kw, in,
out], [in, out]) and a bias. Keras flattens the last 7 x 7 x 512 feature
map in its channels-last order (height, width, channel); this project's VGG
flattens as torchvision does (channel, height, width), so fc1's rows are
reordered; nothing else changes.

Both of Keras's files are read (trainer/init_weights.py): the published
`.h5` (Keras 2's layout: `layer_names`, each layer's `weight_names`) and
Keras 3's `.weights.h5` (`layers/*/vars/0, 1` under the layer's name).
Keras's other applications are not this project's models: its ResNet50 is
v1 (the stride on the first 1x1 convolution, not the 3x3), and it has no
ViT, AlexNet or GoogLeNet.
"""

import re

import numpy as np

from models.published import common


def recognises(names) -> bool:
  return any(re.match(r'block\d_conv\d/', n) for n in names)


def holds(names) -> str:
  del names
  return 'vgg'


def to_ours(tensors, read) -> common.Converted:
  """The file's tensors ('block1_conv1/kernel', ...) as our VGG's."""
  out = common.Converted()
  for name in tensors:
    layer, _, leaf = name.partition('/')
    if leaf not in ('kernel', 'bias'):
      raise common.LayoutError(f'{name} is no tensor of a Keras VGG')
    if (m := re.fullmatch(r'block(\d)_conv(\d)', layer)):
      out.put(f'params/stage{m[1]}/conv{m[2]}/{leaf}', name, np.asarray(read(name)))
    elif layer == 'fc1' and leaf == 'kernel':
      kernel = np.asarray(read(name))  # rows in (7, 7, C) order
      side = 7
      channels = kernel.shape[0] // (side * side)
      out.put('params/fc1/kernel', name, np.ascontiguousarray(
          kernel.reshape(side, side, channels, -1).transpose(2, 0, 1, 3).reshape(kernel.shape)))
    elif layer in ('fc1', 'fc2', 'predictions'):
      ours = 'head' if layer == 'predictions' else layer
      out.put(f'params/{ours}/{leaf}', name, np.asarray(read(name)))
    else:
      raise common.LayoutError(f'{name} is no tensor of a Keras VGG')
  return out


def read_h5(path: str) -> dict:
  """{'block1_conv1/kernel': array, ...} of a Keras weights file, in
  either of Keras's layouts."""
  import h5py  # pylint: disable=g-import-not-at-top
  tensors = {}
  with h5py.File(path, 'r') as f:
    if 'layer_names' in f.attrs:  # Keras 2's .h5
      for layer in f.attrs['layer_names']:
        layer = layer.decode() if isinstance(layer, bytes) else layer
        # Named 'block1_conv1/kernel:0' by Keras 2, 'block1_conv1_W_1:0' in
        # the oldest published files: the order (kernel, bias) is what holds.
        weights = f[layer].attrs['weight_names']
        for leaf, weight in zip(('kernel', 'bias'), weights):
          weight = weight.decode() if isinstance(weight, bytes) else weight
          tensors[f'{layer}/{leaf}'] = f[layer][weight][()]
        if len(weights) > 2:
          raise common.LayoutError(f'layer {layer} has {len(weights)} weights; a Keras '
                                   'VGG layer has a kernel and a bias')
    else:  # Keras 3's .weights.h5
      for group in f['layers'].values():
        variables = group.get('vars')
        if variables is None or not len(variables):
          continue
        layer = variables.attrs['name']
        if len(variables) > 2:
          raise common.LayoutError(f'layer {layer} has {len(variables)} weights; a '
                                   'Keras VGG layer has a kernel and a bias')
        for index, leaf in enumerate(('kernel', 'bias')[:len(variables)]):
          tensors[f'{layer}/{leaf}'] = variables[str(index)][()]
  return tensors
