"""ViT checkpoints of big_vision and vision_transformer (the AugReg `.npz`).

The layout (Dosovitskiy et al.'s released code, and the AugReg checkpoints
of Steiner et al. 2021) names the arrays as flax did:

  cls                                       [1, 1, D]
  embedding/kernel, embedding/bias          [P, P, 3, D], [D]
  Transformer/posembed_input/pos_embedding  [1, 1 + N, D]   (big_vision: pos_embedding)
  Transformer/encoderblock_I/
    LayerNorm_0                             the first LayerNorm (scale, bias)
    MultiHeadDotProductAttention_1          query, key, value [D, H, D/H], out [H, D/H, D]
    LayerNorm_2                             the second LayerNorm
    MlpBlock_3/Dense_0, Dense_1             [D, M], [M, D]
  Transformer/encoder_norm                  the last LayerNorm
  head/kernel, head/bias                    [D, C], [C]
  pre_logits/kernel, pre_logits/bias        ImageNet-21k checkpoints' extra layer

big_vision numbers the block's modules LayerNorm_0, MultiHeadDotProductAttention_0,
LayerNorm_1, MlpBlock_0, and may stack the blocks ('Transformer/encoderblock/...'
with the block as the leading axis); a checkpoint saved with its optimiser
holds the parameters under 'opt/target/' (or 'params/'). This project's ViT
(models/vit.py) has the same arrays in the same layouts under its own names,
so nothing is transposed: only renamed.
"""

import re

import numpy as np

from models.published import common

# The prefixes under which a saved training state keeps its parameters.
_PREFIXES = ('opt/target/', 'params/')
# The block's modules, in both numberings -> ours.
_BLOCK_MODULES = {
    'LayerNorm_0': 'ln1', 'LayerNorm_1': 'ln2', 'LayerNorm_2': 'ln2',
    'MultiHeadDotProductAttention_0': 'attention', 'MultiHeadDotProductAttention_1': 'attention',
    'MlpBlock_0': 'mlp', 'MlpBlock_3': 'mlp',
}
_MLP_LAYERS = {'Dense_0': 'fc1', 'Dense_1': 'fc2'}
_TOP = {'cls': 'cls', 'pos_embedding': 'pos_embedding',
        'Transformer/posembed_input/pos_embedding': 'pos_embedding',
        'embedding/kernel': 'embedding/kernel', 'embedding/bias': 'embedding/bias',
        'Transformer/encoder_norm/scale': 'encoder_norm/scale',
        'Transformer/encoder_norm/bias': 'encoder_norm/bias',
        'head/kernel': 'head/kernel', 'head/bias': 'head/bias'}


def recognises(names) -> bool:
  """Whether these tensor names are this layout's."""
  return any(_strip(n).startswith(('Transformer/', 'embedding/')) for n in names)


def holds(names) -> str:
  """The kind of model these tensors make: 'vit'."""
  del names
  return 'vit'


def _strip(name: str) -> str:
  for prefix in _PREFIXES:
    if name.startswith(prefix):
      return name[len(prefix):]
  return name


def to_ours(tensors, read) -> common.Converted:
  """The file's tensors (names; `read(name)` gives the array) as our ViT's."""
  out = common.Converted()
  has_target = any(n.startswith(_PREFIXES) for n in tensors)
  for name in tensors:
    if has_target and not name.startswith(_PREFIXES):
      out.ignored[name] = 'not a parameter (optimiser state or step)'
      continue
    short = _strip(name)
    if short in _TOP:
      out.put('params/' + _TOP[short], name, read(name))
    elif short.startswith('pre_logits/'):
      out.ignored[name] = 'pre_logits'  # trainer/init_weights.py decides
    elif (m := re.fullmatch(r'Transformer/encoderblock_(\d+)/(.+)', short)):
      out.put(f'params/encoderblock_{int(m[1])}/{_block_path(m[2], name)}', name, read(name))
    elif (m := re.fullmatch(r'Transformer/encoderblock/(.+)', short)):  # stacked
      stacked = read(name)
      for i, array in enumerate(stacked):
        out.put(f'params/encoderblock_{i}/{_block_path(m[1], name)}', f'{name}[{i}]', array)
    else:
      raise common.LayoutError(f'{name} is no tensor of a big_vision ViT')
  return out


def _block_path(inside: str, name: str) -> str:
  module, _, rest = inside.partition('/')
  ours = _BLOCK_MODULES.get(module)
  if ours == 'mlp':
    layer, _, leaf = rest.partition('/')
    if layer in _MLP_LAYERS:
      return f'mlp/{_MLP_LAYERS[layer]}/{leaf}'
  elif ours is not None:
    return f'{ours}/{rest}'
  raise common.LayoutError(f'{name} is no tensor of a big_vision ViT block')


def from_ours(params: dict) -> dict:
  """Our ViT's flat parameters ('params/...' -> array) in the
  vision_transformer naming (the AugReg files' own)."""
  out = {}
  inverse_top = {v: k for k, v in _TOP.items() if k != 'pos_embedding'}
  for path, array in params.items():
    short = path.removeprefix('params/')
    if short in inverse_top:
      out[inverse_top[short]] = array
      continue
    m = re.fullmatch(r'encoderblock_(\d+)/([^/]+)/(.+)', short)
    block, module, rest = m[1], m[2], m[3]
    if module == 'mlp':
      layer, _, leaf = rest.partition('/')
      rest = f'{"Dense_0" if layer == "fc1" else "Dense_1"}/{leaf}'
    theirs = {'ln1': 'LayerNorm_0', 'attention': 'MultiHeadDotProductAttention_1',
              'ln2': 'LayerNorm_2', 'mlp': 'MlpBlock_3'}[module]
    out[f'Transformer/encoderblock_{block}/{theirs}/{rest}'] = np.asarray(array)
  return out
