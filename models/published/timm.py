"""timm's (PyTorch) ViT and ResNet weights: `.safetensors`, or `.npz` of the
same tensors.

PyTorch keeps a linear layer's weight as [out, in] and a convolution's as
[out, in, kh, kw]; flax as [in, out] and [kh, kw, in, out]. timm's ViT fuses
query, key and value into one `attn.qkv` [3D, D] (query first, each split
into heads of D/H, head-major), which ours keeps apart as [D, H, D/H].
Batch norm's `running_mean` and `running_var` are our batch_stats `mean`
and `var` (`num_batches_tracked` has no counterpart: flax keeps none).

ViT (timm's `vit_*` with a class token):
  cls_token, pos_embed, patch_embed.proj.{weight,bias},
  blocks.I.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}, norm, head
ResNet (timm's and torchvision's `resnet*`, v1.5 like ours):
  conv1, bn1, layerS.B.{conv1, bn1, conv2, bn2[, conv3, bn3], downsample.0,
  downsample.1}, fc
timm's ViT computes GELU exactly (erf); ours computes it as set by
model.gelu, which must be 'erf' for these weights to give timm's outputs.
"""

import re

import numpy as np

from models.published import common


def recognises(names) -> bool:
  return any(n.startswith(('blocks.', 'patch_embed.', 'layer1.', 'conv1.'))
             for n in names)


def holds(names) -> str:
  """The kind of model these tensors make: 'vit' or 'resnet'."""
  return 'vit' if any(n.startswith('blocks.') for n in names) else 'resnet'


def _linear(weight: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(np.asarray(weight).T)


def _conv(weight: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(np.asarray(weight).transpose(2, 3, 1, 0))


def to_ours(tensors, read, num_heads: int | None = None) -> common.Converted:
  """The file's tensors as our ViT's (num_heads: its heads) or ResNet's."""
  if holds(tensors) == 'vit':
    return _vit(tensors, read, num_heads)
  return _resnet(tensors, read)


_VIT_TOP = {'cls_token': ('cls', None), 'pos_embed': ('pos_embedding', None),
            'patch_embed.proj.weight': ('embedding/kernel', _conv),
            'patch_embed.proj.bias': ('embedding/bias', None),
            'norm.weight': ('encoder_norm/scale', None), 'norm.bias': ('encoder_norm/bias', None),
            'head.weight': ('head/kernel', _linear), 'head.bias': ('head/bias', None)}
_VIT_BLOCK = {'norm1.weight': ('ln1/scale', None), 'norm1.bias': ('ln1/bias', None),
              'norm2.weight': ('ln2/scale', None), 'norm2.bias': ('ln2/bias', None),
              'mlp.fc1.weight': ('mlp/fc1/kernel', _linear), 'mlp.fc1.bias': ('mlp/fc1/bias', None),
              'mlp.fc2.weight': ('mlp/fc2/kernel', _linear), 'mlp.fc2.bias': ('mlp/fc2/bias', None)}


def _vit(tensors, read, num_heads: int) -> common.Converted:
  out = common.Converted()
  for name in tensors:
    if name in _VIT_TOP:
      ours, change = _VIT_TOP[name]
      out.put('params/' + ours, name, (change or np.asarray)(read(name)))
      continue
    m = re.fullmatch(r'blocks\.(\d+)\.(.+)', name)
    if m is None:
      raise common.LayoutError(f'{name} is no tensor of a timm ViT with a class token')
    block, inside = f'params/encoderblock_{int(m[1])}/', m[2]
    if inside in _VIT_BLOCK:
      ours, change = _VIT_BLOCK[inside]
      out.put(block + ours, name, (change or np.asarray)(read(name)))
    elif inside in ('attn.qkv.weight', 'attn.qkv.bias'):
      fused = np.asarray(read(name))
      width = fused.shape[0] // 3
      heads = (num_heads, width // num_heads)
      for piece, part in zip(('query', 'key', 'value'), np.split(fused, 3, axis=0)):
        array = (part.T.reshape(width, *heads) if part.ndim == 2 else part.reshape(heads))
        out.put(f'{block}attention/{piece}/{"kernel" if part.ndim == 2 else "bias"}',
                name, np.ascontiguousarray(array))
    elif inside == 'attn.proj.weight':
      weight = np.asarray(read(name))  # [D out, H * D/H in]
      width = weight.shape[0]
      out.put(block + 'attention/out/kernel', name, np.ascontiguousarray(
          weight.T.reshape(num_heads, width // num_heads, width)))
    elif inside == 'attn.proj.bias':
      out.put(block + 'attention/out/bias', name, np.asarray(read(name)))
    else:
      raise common.LayoutError(f'{name} is no tensor of a timm ViT block')
  return out


_BN = {'weight': ('params', 'scale'), 'bias': ('params', 'bias'),
       'running_mean': ('batch_stats', 'mean'), 'running_var': ('batch_stats', 'var')}


def _resnet(tensors, read) -> common.Converted:
  out = common.Converted()
  for name in tensors:
    module, _, leaf = name.rpartition('.')
    if leaf == 'num_batches_tracked':
      out.ignored[name] = 'a batch count that flax does not keep'
      continue
    ours = _resnet_module(module)
    if ours is None:
      raise common.LayoutError(f'{name} is no tensor of a timm ResNet')
    if ours.endswith(('conv', 'Conv_0', 'Conv_1', 'Conv_2')) and leaf == 'weight':
      out.put(f'params/{ours}/kernel', name, _conv(read(name)))
    elif ours == 'head':
      out.put(f'params/head/{"kernel" if leaf == "weight" else "bias"}', name,
              _linear(read(name)) if leaf == 'weight' else np.asarray(read(name)))
    elif leaf in _BN and not ours.endswith(('conv', 'Conv_0', 'Conv_1', 'Conv_2')):
      collection, ours_leaf = _BN[leaf]
      out.put(f'{collection}/{ours}/{ours_leaf}', name, np.asarray(read(name)))
    else:
      raise common.LayoutError(f'{name} is no tensor of a timm ResNet')
  return out


def _resnet_module(module: str) -> str | None:
  """timm's module name -> ours (None: none)."""
  top = {'conv1': 'stem_conv', 'bn1': 'stem_bn', 'fc': 'head'}
  if module in top:
    return top[module]
  m = re.fullmatch(r'layer(\d)\.(\d+)\.(conv[123]|bn[123]|downsample\.[01])', module)
  if m is None:
    return None
  block = f'stage{m[1]}_block{int(m[2]) + 1}'
  inside = {'downsample.0': 'proj_conv', 'downsample.1': 'proj_bn'}.get(m[3])
  if inside is None:  # conv1 -> Conv_0, bn1 -> BatchNorm_0, ...
    index = int(m[3][-1]) - 1
    inside = f'Conv_{index}' if m[3].startswith('conv') else f'BatchNorm_{index}'
  return f'{block}/{inside}'


def from_ours(arrays: dict) -> dict:
  """Our ViT's or ResNet's flat parameters and batch statistics
  ('params/...', 'batch_stats/...' -> array) as timm's state dict, with
  `num_batches_tracked` (0) for each batch norm, as PyTorch's strict
  loading expects."""
  if 'params/cls' in arrays:
    return _vit_from_ours(arrays)
  return _resnet_from_ours(arrays)


def _vit_from_ours(arrays: dict) -> dict:
  inverse_top = {ours: (name, change) for name, (ours, change) in _VIT_TOP.items()}
  inverse_block = {ours: (name, change) for name, (ours, change) in _VIT_BLOCK.items()}
  out = {}
  for path, array in arrays.items():
    short = path.removeprefix('params/')
    if short in inverse_top:
      name, change = inverse_top[short]
      out[name] = _to_torch(array, change)
      continue
    m = re.fullmatch(r'encoderblock_(\d+)/(.+)', short)
    block, inside = f'blocks.{m[1]}.', m[2]
    if inside in inverse_block:
      name, change = inverse_block[inside]
      out[block + name] = _to_torch(array, change)
    elif inside == 'attention/out/kernel':  # [H, D/H, D] -> [D, H * D/H]
      out[block + 'attn.proj.weight'] = np.ascontiguousarray(
          np.asarray(array).reshape(-1, array.shape[-1]).T)
    elif inside == 'attention/out/bias':
      out[block + 'attn.proj.bias'] = np.asarray(array)
  for block in sorted({p.split('/')[1] for p in arrays if '/encoderblock_' in p}):
    prefix, i = f'params/{block}/attention/', block.rsplit('_', 1)[1]
    kernels = [np.asarray(arrays[f'{prefix}{n}/kernel']) for n in ('query', 'key', 'value')]
    biases = [np.asarray(arrays[f'{prefix}{n}/bias']) for n in ('query', 'key', 'value')]
    out[f'blocks.{i}.attn.qkv.weight'] = np.ascontiguousarray(np.concatenate(
        [k.reshape(k.shape[0], -1).T for k in kernels]))  # [D, H, D/H] -> [D out, D in]
    out[f'blocks.{i}.attn.qkv.bias'] = np.concatenate([b.reshape(-1) for b in biases])
  return out


def _to_torch(array, change) -> np.ndarray:
  array = np.asarray(array)
  if change is _linear:
    return np.ascontiguousarray(array.T)
  if change is _conv:
    return np.ascontiguousarray(array.transpose(3, 2, 0, 1))
  return array


def _resnet_from_ours(arrays: dict) -> dict:
  ours_to_timm = {}
  for name in _resnet_module_names(arrays):
    ours_to_timm[_resnet_module(name)] = name
  out = {}
  inverse_bn = {v: k for k, v in _BN.items()}
  for path, array in arrays.items():
    collection, rest = path.split('/', 1)
    module, leaf = rest.rsplit('/', 1)
    name = ours_to_timm[module]
    if leaf == 'kernel':
      out[f'{name}.weight'] = _to_torch(array, _linear if module == 'head' else _conv)
    elif module == 'head':
      out[f'{name}.bias'] = np.asarray(array)
    else:
      out[f'{name}.{inverse_bn[(collection, leaf)]}'] = np.asarray(array)
      out[f'{name}.num_batches_tracked'] = np.array(0, np.int64)
  return out


def _resnet_module_names(arrays: dict) -> list[str]:
  """timm's module names for the ResNet whose parameters `arrays` holds."""
  names = ['conv1', 'bn1', 'fc']
  for path in arrays:
    m = re.match(r'params/stage(\d)_block(\d+)/(Conv_\d|BatchNorm_\d|proj_conv|proj_bn)/', path)
    if m:
      inside = {'proj_conv': 'downsample.0', 'proj_bn': 'downsample.1'}.get(m[3])
      if inside is None:
        kind, index = m[3].split('_')
        inside = f'{"conv" if kind == "Conv" else "bn"}{int(index) + 1}'
      names.append(f'layer{m[1]}.{int(m[2]) - 1}.{inside}')
  return sorted(set(names))

