"""The paper a recipe follows: its hyper-parameters, where it gives each, and
its published result.

A recipe writes its paper's table once, as a `Paper`: `apply` sets the config
from it and `describe` appends it to the recipe's docstring, so what the
docstring says, what a run does and what tests/test_paper_recipes.py checks
are the same table.
"""

import dataclasses
import textwrap
from typing import Any

import ml_collections

from configs import default
from configs import schema


@dataclasses.dataclass(frozen=True)
class Paper:
  source: str  # authors, year, title and where the values are read
  settings: dict[str, tuple[Any, str]]  # config key: (the paper's value, where it gives it)
  batch_size: int  # the global batch of the published result
  top1: float  # the published ImageNet top-1 (%) on the 50,000 validation images
  top1_where: str  # where it is published and what it is (a mean, a target)
  deviations: tuple[str, ...] = ()  # what the recipe does otherwise, and why


def apply(config: ml_collections.ConfigDict, paper: Paper) -> ml_collections.ConfigDict:
  """`config` with every setting of the paper (dotted keys: 'model.name').
  A key that configs/default.py does not declare is an error here, where
  ConfigDict would add it."""
  unknown = set(paper.settings) - set(schema.dotted_items(config))
  if unknown:
    raise KeyError(f'not keys of configs/default.py: {sorted(unknown)}')
  config.update_from_flattened_dict({key: value for key, (value, _) in paper.settings.items()})
  return config


def imagenet_fine_tuning(paper: Paper, augment: str) -> ml_collections.ConfigDict:
  """A fine-tuning recipe's config: its paper's table on ImageNet from tfds
  at the paper's batch, evaluated on the centred square of the shorter side
  (data.eval_crop_fraction 1.0), logged, evaluated and saved as long runs are."""
  config = apply(default.get_config(), paper)
  config.batch_size = paper.batch_size
  config.model.dtype = 'auto'  # bfloat16 on GPUs and TPUs, float32 on CPU
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.eval_split = 'validation'
  config.data.augment = augment
  config.data.eval_crop_fraction = 1.0
  config.log_every_steps = 100
  config.eval_every_steps = 2000
  config.checkpoint.every_steps = 2000
  config.checkpoint.every_minutes = 30.0
  return config


def _wrap(text: str, indent: str = '') -> str:
  return textwrap.fill(text, 79, initial_indent=indent,
                       subsequent_indent=indent + '    ' if indent else '')


def describe(paper: Paper) -> str:
  """The paper's table as the docstring's last part."""
  lines = ['', _wrap(f'Source: {paper.source}.'), '',
           "The source's hyper-parameters, as this recipe sets them (key = value: where):"]
  lines += [_wrap(f'{key} = {value!r}: {where}', '  ')
            for key, (value, where) in paper.settings.items()]
  lines += ['', _wrap(f'Published top-1: {paper.top1}% at batch {paper.batch_size} '
                      f'({paper.top1_where}).')]
  if paper.deviations:
    lines += ['', 'Where this recipe differs, and why:']
    lines += [_wrap(f'- {deviation}', '  ') for deviation in paper.deviations]
  return '\n'.join(lines) + '\n'
