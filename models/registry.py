"""Config name -> model. The one place the trainer gets a model from."""

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import alexnet
from models import conv_forms
from models import googlenet
from models import remat as remat_lib
from models import resnet
from models import vgg
from models import vit

_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}
DTYPES: tuple[str, ...] = ('auto', *_DTYPES)  # compute dtypes by config name


def compute_dtype(name: str) -> str:
  """A model.dtype with 'auto' resolved for the platform at hand: bfloat16 on
  GPUs and TPUs, whose matrix units run it several times faster than float32,
  float32 on CPU. 'float32' and 'bfloat16' are returned as they are."""
  if name != 'auto':
    return name
  return 'float32' if jax.default_backend() == 'cpu' else 'bfloat16'


def _resnet(depth: int) -> Callable[..., nn.Module]:
  def make(*, width: int, image_size: int, bn_group_size: int,
           **kwargs) -> nn.Module:
    del image_size  # Global pooling: any resolution works.
    kwargs['bn_group_size'] = bn_group_size
    if width:
      kwargs['width'] = width
    return resnet.resnet(depth, **kwargs)
  return make


def _vit_width_sizes(width: int) -> dict[str, int]:
  """The ViT sizes that model.width sets ({} for 0: the published ones)."""
  if not width:
    return {}
  # One knob for a smaller or larger ViT: the residual width, with the
  # paper's MLP ratio of 4 and 64-wide heads (one head below 128).
  return {'hidden_size': width, 'mlp_dim': 4 * width,
          'num_heads': max(1, width // 64)}


def _vit(variant: str, patch_size: int) -> Callable[..., nn.Module]:
  def make(*, width: int, image_size: int, bn_group_size: int,
           **kwargs) -> nn.Module:
    del bn_group_size  # No batch norm.
    # Explicit hidden_size/mlp_dim/num_heads/depth overrides still win.
    kwargs = {**_vit_width_sizes(width), **kwargs}
    patch = kwargs.pop('patch_size', patch_size)  # an override wins
    return vit.vit(variant, patch, image_size=image_size, **kwargs)
  return make


def _classic(build: Callable[..., nn.Module],
             batch_norm: bool) -> Callable[..., nn.Module]:
  """AlexNet, VGG, GoogLeNet: `width` is the first conv's channels (published
  64), every conv (and AlexNet/VGG's 4096-wide FC layers) scaled by width/64."""
  def make(*, width: int, image_size: int, bn_group_size: int,
           **kwargs) -> nn.Module:
    del image_size  # Adaptive average pooling: any resolution works.
    if batch_norm:
      kwargs['bn_group_size'] = bn_group_size
    if width:
      kwargs['width'] = width
    return build(**kwargs)
  return make


# ViT name -> (variant, patch size).
# Patch 14: ViT-H/14 as published, ViT-g/14 and ViT-G/14 (vit_bigg14) as
# Zhai et al. 2022 train them.
_VITS = {f'vit_{v}{p}': (v, p) for v in vit.VARIANTS for p in (14, 16, 32)}

_REGISTRY: dict[str, Callable[..., nn.Module]] = {
    **{f'resnet{d}': _resnet(d) for d in sorted(resnet.STAGE_SIZES)},
    **{name: _vit(*spec) for name, spec in _VITS.items()},
    'alexnet': _classic(alexnet.alexnet, batch_norm=False),
    **{f'vgg{d}': _classic(functools.partial(vgg.vgg, d), batch_norm=False)
       for d in sorted(vgg.STAGE_SIZES)},
    'googlenet': _classic(googlenet.googlenet, batch_norm=True),
}

MODEL_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def create_model(name: str, *, num_classes: int, dtype: str = 'float32',
                 width: int = 0, depth: int = 0, remat: str = 'none',
                 image_size: int = 224, bn_group_size: int = 0, conv_form: str = 'xla',
                 **overrides: Any) -> nn.Module:
  """Builds the named model.

  Args:
    name: one of MODEL_NAMES.
    num_classes: outputs of the classifier.
    dtype: compute dtype, 'float32', 'bfloat16' or 'auto' (compute_dtype);
      parameters stay float32.
    width: 0 for the published size. ResNet: channels of the stem and first
      stage (published 64). ViT: hidden size, with mlp_dim = 4 * width and
      num_heads = max(1, width // 64). AlexNet, VGG, GoogLeNet: channels of
      the first conv (published 64); all convs and AlexNet/VGG's hidden FC
      layers scale by width / 64.
    depth: ViT only: encoder blocks; 0 for the published depth.
    remat: 'none', 'full' or 'dots' (models/remat.py): what each residual block
      recomputes in the backward pass (less activation memory, more compute);
      VGG: each stage, GoogLeNet: each inception module, AlexNet: ignored.
    image_size: input resolution; ViT sizes its position embedding by it.
    bn_group_size: models with batch norm: statistics over groups of this
      many examples (models/batch_norm.py); 0: over the whole batch.
    conv_form: how convolutions are computed (models/conv_forms.py: xla,
      patches, by_shape); parameters and results do not depend on it.
    **overrides: module fields to set directly, e.g. ViT's hidden_size,
      mlp_dim, num_heads, or ResNet's stage_sizes.

  Raises:
    ValueError: for an unknown name, dtype, remat mode or conv form, or a
      depth for a model other than a ViT.
  """
  if name not in _REGISTRY:
    raise ValueError(
        f'unknown model {name!r}; accepted: {", ".join(MODEL_NAMES)}')
  if depth:
    if not is_vit(name):
      raise ValueError(f'depth={depth}: only ViT models take a depth; '
                       f'{name} has its depth in its name')
    overrides['depth'] = depth
  if dtype not in DTYPES:
    raise ValueError(
        f'unknown dtype {dtype!r}; accepted: {", ".join(DTYPES)}')
  remat_lib.check_mode(remat)
  conv_forms.conv_function(conv_form)  # raises for an unknown form
  return _REGISTRY[name](
      num_classes=num_classes, dtype=_DTYPES[compute_dtype(dtype)], remat=remat,
      width=width, image_size=image_size, bn_group_size=bn_group_size,
      conv_form=conv_form, **overrides)


def size_problems(name: str, *, width: int, image_size: int) -> dict[str, str]:
  """The create_model arguments ('width', 'image_size') with which the named
  model cannot be built, each with why in one line ({}: it can be built).

  Builds nothing and starts no device, so config validation asks before the
  runtime starts. Only ViTs have such rules (heads divide the width, patches
  tile the image); the other models pool globally and take any size."""
  if name not in _VITS:
    return {}
  variant, patch_size = _VITS[name]
  sizes = {**vit.VARIANTS[variant], **_vit_width_sizes(width)}
  problems = {}
  heads = vit.heads_problem(sizes['hidden_size'], sizes['num_heads'])
  if heads:
    problems['width'] = (f'{heads} (a width of 128 or more has width // 64 '
                         'heads; a multiple of 64 works)')
  patch = vit.patch_problem(patch_size, image_size)
  if patch:
    problems['image_size'] = f'{patch}; use a multiple of {patch_size}'
  return problems


def vit_variant(name: str) -> str:
  """A ViT's variant ('b' of vit_b16), a key of models/vit.py's VARIANTS."""
  return _VITS[name][0]


def is_vit(name: str) -> bool:
  """Whether the named model is a ViT (whose depth may be overridden)."""
  return name.startswith('vit_') and name in _REGISTRY


def has_residual_blocks(name: str) -> bool:
  """Whether the model is built of residual blocks (ResNets and ViTs), which
  stochastic depth (drop_path_rate) drops."""
  return name in _REGISTRY and (name.startswith('resnet') or is_vit(name))


def has_batch_norm(name: str) -> bool:
  """Whether the model keeps a 'batch_stats' collection (ResNets and
  GoogLeNet do)."""
  if name not in _REGISTRY:
    raise ValueError(
        f'unknown model {name!r}; accepted: {", ".join(MODEL_NAMES)}')
  return name.startswith('resnet') or name == 'googlenet'
