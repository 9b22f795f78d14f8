"""Published weight files made here, and forward passes that are not ours.

Each maker writes random tensors under the names and in the layouts of the
published format (big_vision / vision_transformer's AugReg `.npz`, timm's
PyTorch state dicts), from the format's own description, not through the
project's mapping (models/published/). Each forward pass computes logits
from those tensors by the format's own names and conventions (PyTorch's
[out, in] weights and NCHW convolutions for timm), in float64 numpy, so that
a swapped query and key, a transposed kernel or a wrong GELU in the
project's import makes the logits differ.
"""

import math

import numpy as np
from scipy import special

# --- Makers -------------------------------------------------------------------


def augreg_vit(rng, *, patch, tokens_side, width, heads, mlp, depth, classes,
               naming='vision_transformer', make=None) -> dict:
  """{name: array} of a ViT in the AugReg layout; naming 'big_vision'
  numbers a block's modules 0, 0, 1, 0 and 'stacked' also stacks the blocks
  (big_vision's scan). make(shape) makes each array (random by default)."""
  make = make or (lambda shape: rng.normal(0, 0.2, shape).astype(np.float32))
  kv = width // heads
  t = {'cls': make((1, 1, width)),
       'embedding/kernel': make((patch, patch, 3, width)), 'embedding/bias': make((width,)),
       'Transformer/encoder_norm/scale': 1 + make((width,)),
       'Transformer/encoder_norm/bias': make((width,)),
       'head/kernel': make((width, classes)), 'head/bias': make((classes,))}
  positions = make((1, 1 + tokens_side ** 2, width))
  modules = (('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2', 'MlpBlock_3')
             if naming == 'vision_transformer' else
             ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1', 'MlpBlock_0'))
  ln1, attention, ln2, mlp_block = modules
  blocks = []
  for _ in range(depth):
    block = {f'{ln1}/scale': 1 + make((width,)), f'{ln1}/bias': make((width,)),
             f'{ln2}/scale': 1 + make((width,)), f'{ln2}/bias': make((width,)),
             f'{mlp_block}/Dense_0/kernel': make((width, mlp)),
             f'{mlp_block}/Dense_0/bias': make((mlp,)),
             f'{mlp_block}/Dense_1/kernel': make((mlp, width)),
             f'{mlp_block}/Dense_1/bias': make((width,)),
             f'{attention}/out/kernel': make((heads, kv, width)),
             f'{attention}/out/bias': make((width,))}
    for piece in ('query', 'key', 'value'):
      block[f'{attention}/{piece}/kernel'] = make((width, heads, kv))
      block[f'{attention}/{piece}/bias'] = make((heads, kv))
    blocks.append(block)
  if naming == 'stacked':
    t['pos_embedding'] = positions
    for key in blocks[0]:
      t[f'Transformer/encoderblock/{key}'] = np.stack([b[key] for b in blocks])
  else:
    t['Transformer/posembed_input/pos_embedding'] = positions
    for i, block in enumerate(blocks):
      for key, array in block.items():
        t[f'Transformer/encoderblock_{i}/{key}'] = array
  return t


def timm_vit(rng, *, patch, tokens_side, width, mlp, depth, classes) -> dict:
  """{name: array} of a timm ViT (a class token; PyTorch layouts)."""
  make = lambda shape: rng.normal(0, 0.2, shape).astype(np.float32)
  t = {'cls_token': make((1, 1, width)), 'pos_embed': make((1, 1 + tokens_side ** 2, width)),
       'patch_embed.proj.weight': make((width, 3, patch, patch)),
       'patch_embed.proj.bias': make((width,)),
       'norm.weight': 1 + make((width,)), 'norm.bias': make((width,)),
       'head.weight': make((classes, width)), 'head.bias': make((classes,))}
  for i in range(depth):
    b = f'blocks.{i}.'
    t.update({b + 'norm1.weight': 1 + make((width,)), b + 'norm1.bias': make((width,)),
              b + 'attn.qkv.weight': make((3 * width, width)),
              b + 'attn.qkv.bias': make((3 * width,)),
              b + 'attn.proj.weight': make((width, width)), b + 'attn.proj.bias': make((width,)),
              b + 'norm2.weight': 1 + make((width,)), b + 'norm2.bias': make((width,)),
              b + 'mlp.fc1.weight': make((mlp, width)), b + 'mlp.fc1.bias': make((mlp,)),
              b + 'mlp.fc2.weight': make((width, mlp)), b + 'mlp.fc2.bias': make((width,))})
  return t


def timm_resnet(rng, *, blocks, width, bottleneck, classes, make=None) -> dict:
  """{name: array} of a timm (torchvision) ResNet: `blocks` per layer,
  BasicBlock or Bottleneck, the first layer `width` wide."""
  def conv(o, i, k):
    return (make((o, i, k, k)) if make else
            rng.normal(0, math.sqrt(2 / (i * k * k)), (o, i, k, k)).astype(np.float32))

  def bn(prefix, c):
    return {f'{prefix}.weight': make((c,)) if make else rng.uniform(0.5, 1.5, c).astype(np.float32),
            f'{prefix}.bias': make((c,)) if make else rng.normal(0, 0.1, c).astype(np.float32),
            f'{prefix}.running_mean': make((c,)) if make else rng.normal(0, 0.1, c).astype(np.float32),
            f'{prefix}.running_var': make((c,)) if make else rng.uniform(0.5, 1.5, c).astype(np.float32),
            f'{prefix}.num_batches_tracked': np.array(100, np.int64)}
  t = {'conv1.weight': conv(width, 3, 7), **bn('bn1', width)}
  channels = width
  expansion = 4 if bottleneck else 1
  for layer, count in enumerate(blocks, start=1):
    planes = width * 2 ** (layer - 1)
    for b in range(count):
      p = f'layer{layer}.{b}.'
      stride = 2 if layer > 1 and b == 0 else 1
      if bottleneck:
        t.update({p + 'conv1.weight': conv(planes, channels, 1), **bn(p + 'bn1', planes),
                  p + 'conv2.weight': conv(planes, planes, 3), **bn(p + 'bn2', planes),
                  p + 'conv3.weight': conv(planes * 4, planes, 1), **bn(p + 'bn3', planes * 4)})
      else:
        t.update({p + 'conv1.weight': conv(planes, channels, 3), **bn(p + 'bn1', planes),
                  p + 'conv2.weight': conv(planes, planes, 3), **bn(p + 'bn2', planes)})
      if stride != 1 or channels != planes * expansion:
        t.update({p + 'downsample.0.weight': conv(planes * expansion, channels, 1),
                  **bn(p + 'downsample.1', planes * expansion)})
      channels = planes * expansion
  t['fc.weight'] = (make((classes, channels)) if make else
                    rng.normal(0, 0.1, (classes, channels)).astype(np.float32))
  t['fc.bias'] = make((classes,)) if make else np.zeros(classes, np.float32)
  return t


# --- Forward passes -----------------------------------------------------------


def _layer_norm(x, scale, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


def _softmax(x):
  x = x - x.max(-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(-1, keepdims=True)


def augreg_vit_logits(t: dict, images: np.ndarray) -> np.ndarray:
  """big_vision's ViT on NHWC images, from vision_transformer-named tensors
  (blocks numbered; GELU's tanh approximation, LayerNorm epsilon 1e-6)."""
  t = {k: np.asarray(v, np.float64) for k, v in t.items()}
  p, width = t['embedding/kernel'].shape[0], t['embedding/kernel'].shape[-1]
  b, s = images.shape[:2]
  g = s // p
  patches = images.astype(np.float64).reshape(b, g, p, g, p, 3).transpose(0, 1, 3, 2, 4, 5)
  x = patches.reshape(b, g * g, -1) @ t['embedding/kernel'].reshape(-1, width)
  x = x + t['embedding/bias']
  x = np.concatenate([np.tile(t['cls'], (b, 1, 1)), x], 1)
  x = x + t['Transformer/posembed_input/pos_embedding']
  depth = len({k.split('/')[1] for k in t if k.startswith('Transformer/encoderblock_')})
  for i in range(depth):
    e = lambda name: t[f'Transformer/encoderblock_{i}/{name}']
    y = _layer_norm(x, e('LayerNorm_0/scale'), e('LayerNorm_0/bias'), 1e-6)
    a = 'MultiHeadDotProductAttention_1/'
    q, k, v = (np.einsum('btd,dnh->btnh', y, e(a + n + '/kernel')) + e(a + n + '/bias')
               for n in ('query', 'key', 'value'))
    weights = _softmax(np.einsum('bqnh,bknh->bnqk', q, k) / math.sqrt(q.shape[-1]))
    y = np.einsum('bnqk,bknh->bqnh', weights, v)
    x = x + np.einsum('bqnh,nhd->bqd', y, e(a + 'out/kernel')) + e(a + 'out/bias')
    y = _layer_norm(x, e('LayerNorm_2/scale'), e('LayerNorm_2/bias'), 1e-6)
    y = y @ e('MlpBlock_3/Dense_0/kernel') + e('MlpBlock_3/Dense_0/bias')
    y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
    x = x + y @ e('MlpBlock_3/Dense_1/kernel') + e('MlpBlock_3/Dense_1/bias')
  x = _layer_norm(x, t['Transformer/encoder_norm/scale'], t['Transformer/encoder_norm/bias'], 1e-6)
  return x[:, 0] @ t['head/kernel'] + t['head/bias']


def timm_vit_logits(t: dict, images: np.ndarray, heads: int) -> np.ndarray:
  """timm's VisionTransformer.forward (eval) on NHWC images: PyTorch's
  conventions, exact GELU, LayerNorm epsilon 1e-6."""
  t = {k: np.asarray(v, np.float64) for k, v in t.items()}
  w = t['patch_embed.proj.weight']  # [D, 3, P, P]
  width, p = w.shape[0], w.shape[-1]
  nchw = images.astype(np.float64).transpose(0, 3, 1, 2)
  b, _, s, _ = nchw.shape
  g = s // p
  patches = nchw.reshape(b, 3, g, p, g, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, g * g, -1)
  x = patches @ w.reshape(width, -1).T + t['patch_embed.proj.bias']
  x = np.concatenate([np.tile(t['cls_token'], (b, 1, 1)), x], 1) + t['pos_embed']
  depth = len({k.split('.')[1] for k in t if k.startswith('blocks.')})
  for i in range(depth):
    e = lambda name: t[f'blocks.{i}.{name}']
    y = _layer_norm(x, e('norm1.weight'), e('norm1.bias'), 1e-6)
    n = x.shape[1]
    qkv = (y @ e('attn.qkv.weight').T + e('attn.qkv.bias')).reshape(b, n, 3, heads, -1)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    weights = _softmax(np.einsum('bqnh,bknh->bnqk', q, k) / math.sqrt(q.shape[-1]))
    y = np.einsum('bnqk,bknh->bqnh', weights, v).reshape(b, n, width)
    x = x + y @ e('attn.proj.weight').T + e('attn.proj.bias')
    y = _layer_norm(x, e('norm2.weight'), e('norm2.bias'), 1e-6)
    y = y @ e('mlp.fc1.weight').T + e('mlp.fc1.bias')
    y = 0.5 * y * (1 + special.erf(y / math.sqrt(2)))
    x = x + y @ e('mlp.fc2.weight').T + e('mlp.fc2.bias')
  x = _layer_norm(x, t['norm.weight'], t['norm.bias'], 1e-6)
  return x[:, 0] @ t['head.weight'].T + t['head.bias']


def _conv2d(x, w, stride):
  """PyTorch's Conv2d (no bias, padding k // 2) on NCHW."""
  k = w.shape[-1]
  pad = k // 2
  x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
  return np.einsum('bchwij,ocij->bohw', windows[:, :, ::stride, ::stride], w)


def _bn(x, t, prefix):
  scale = t[prefix + '.weight'] / np.sqrt(t[prefix + '.running_var'] + 1e-5)
  shift = t[prefix + '.bias'] - t[prefix + '.running_mean'] * scale
  return x * scale[:, None, None] + shift[:, None, None]


def timm_resnet_logits(t: dict, images: np.ndarray) -> np.ndarray:
  """timm's ResNet.forward (eval: running statistics) on NHWC images."""
  t = {k: np.asarray(v, np.float64) for k, v in t.items()}
  relu = lambda a: np.maximum(a, 0)
  x = relu(_bn(_conv2d(images.astype(np.float64).transpose(0, 3, 1, 2), t['conv1.weight'], 2),
               t, 'bn1'))
  x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  x = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max((-1, -2))
  layer = 1
  while f'layer{layer}.0.conv1.weight' in t:
    block = 0
    while f'layer{layer}.{block}.conv1.weight' in t:
      p = f'layer{layer}.{block}.'
      stride = 2 if layer > 1 and block == 0 else 1
      if p + 'conv3.weight' in t:  # bottleneck: the stride on the 3x3 (v1.5)
        y = relu(_bn(_conv2d(x, t[p + 'conv1.weight'], 1), t, p + 'bn1'))
        y = relu(_bn(_conv2d(y, t[p + 'conv2.weight'], stride), t, p + 'bn2'))
        y = _bn(_conv2d(y, t[p + 'conv3.weight'], 1), t, p + 'bn3')
      else:
        y = relu(_bn(_conv2d(x, t[p + 'conv1.weight'], stride), t, p + 'bn1'))
        y = _bn(_conv2d(y, t[p + 'conv2.weight'], 1), t, p + 'bn2')
      shortcut = (_bn(_conv2d(x, t[p + 'downsample.0.weight'], stride), t, p + 'downsample.1')
                  if p + 'downsample.0.weight' in t else x)
      x = relu(y + shortcut)
      block += 1
    layer += 1
  return x.mean((2, 3)) @ t['fc.weight'].T + t['fc.bias']
