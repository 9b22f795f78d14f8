"""Checks of the model.* keys, against what models/ itself accepts.

The accepted values come from the models' own modules, so they cannot
drift. Each raises UsageError with one line that names the key.
"""

import math

import ml_collections

from configs.values import at_least, one_of
from core.errors import UsageError
from models import conv_forms
from models import registry
from models import remat
from models import vit


# The deepest published ViT: ViT-G/14 (Zhai et al. 2022, "Scaling Vision
# Transformers"), 48 blocks. models/vit.py unrolls its blocks, so a depth in
# the thousands spends minutes compiling before it fails or fits.
VIT_MAX_DEPTH = 48


def check_config(config: ml_collections.ConfigDict) -> None:
  """model.*, and the model's sizes against data.image_size."""
  model = config.model
  one_of('model.name', model.name, registry.MODEL_NAMES)
  one_of('model.dtype', model.dtype, registry.DTYPES)
  one_of('model.remat', model.remat, remat.MODES)
  one_of('model.conv_form', model.conv_form, ('auto',) + conv_forms.FORMS)
  at_least('model.num_classes', model.num_classes, 0)
  at_least('model.width', model.width, 0)
  at_least('model.depth', model.depth, 0)
  for key in ('drop_path_rate', 'dropout_rate'):
    if not math.isfinite(model[key]) or not 0 <= model[key] < 1:
      raise UsageError(f'model.{key}={model[key]!r} must be in [0, 1) (0: off)')
  if model.drop_path_rate and not registry.has_residual_blocks(model.name):
    raise UsageError(f'model.drop_path_rate={model.drop_path_rate!r}: stochastic depth '
                     f'is for ResNet and ViT models; {model.name} has no residual '
                     f'blocks, use 0')
  one_of('model.gelu', model.gelu, vit.GELUS)
  if model.gelu != 'tanh' and not registry.is_vit(model.name):
    raise UsageError(f'model.gelu={model.gelu!r}: only ViT models have a GELU to '
                     f'choose; use tanh with {model.name}')
  if model.dropout_rate and not registry.is_vit(model.name):
    raise UsageError(f'model.dropout_rate={model.dropout_rate!r}: dropout is for ViT '
                     f'models; use 0 with {model.name}')
  if model.depth and not registry.is_vit(model.name):
    raise UsageError(f'model.depth={model.depth}: only ViT models take '
                     f'a depth; {model.name} has its depth in its name')
  if model.depth > VIT_MAX_DEPTH:
    raise UsageError(f'model.depth={model.depth} must be at most {VIT_MAX_DEPTH}, '
                     'the deepest published ViT (ViT-G/14, Zhai et al. 2022); '
                     'the encoder is unrolled, so compile time and memory grow '
                     'with every block')
  at_least('model.bn_group_size', model.bn_group_size, 0)
  check_model_sizes('model.width', model.name, model.width, config.data.image_size)


def check_model_sizes(width_key: str, name: str, width: int, image_size: int) -> None:
  """The model's own rules on its width and image size (models/registry.py);
  `width_key` names the key the width came from."""
  if image_size <= 0:
    return  # the data check refuses it, in its own words
  problems = registry.size_problems(name, width=width, image_size=image_size)
  keys = {'width': f'{width_key}={width}', 'image_size': f'data.image_size={image_size}'}
  if problems:
    argument, problem = next(iter(problems.items()))
    raise UsageError(f'{keys[argument]} does not fit {name}: {problem}')
