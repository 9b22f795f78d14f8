"""Checks of the keys the modes read: bench.*, eval.checkpoint, predict.top_k,
export.format.

The modes' own modules start a JAX backend when imported, and these checks
run before the runtime starts (cli/validation.py). UsageError with one line
that names the key.
"""

from configs.values import BENCH_DATA, at_least, eval_checkpoint, one_of
from core.errors import UsageError
from models import registry

# What --mode=export writes: a TensorFlow SavedModel, or the weights in a
# published layout (models/published/), for the models that layout has.
EXPORT_FORMATS = {'saved_model': None, 'big_vision': ('ViT', registry.is_vit),
                  'timm': ('ViT and ResNet', lambda name: registry.is_vit(name) or
                           name.startswith('resnet'))}


def check_bench(config) -> None:
  """bench.*: how many steps, on which data (--mode=bench)."""
  at_least('bench.steps', config.bench.steps, 1)
  at_least('bench.warmup_steps', config.bench.warmup_steps, 0)
  one_of('bench.data', config.bench.data, BENCH_DATA)
  if config.bench.data == 'real' and config.data.source == 'synthetic':
    raise UsageError("bench.data='real' times the input pipeline of "
                     "data.source, and data.source='synthetic' has none: set "
                     'data.source (folder, tfds, shapes)')


def check_checkpoint_choice(config) -> None:
  """eval.checkpoint: latest, best or a step (--mode=eval, predict, export)."""
  eval_checkpoint(config.eval.checkpoint)


def check_export(config) -> None:
  """export.format: one of EXPORT_FORMATS, and a layout this model has."""
  one_of('export.format', config.export.format, tuple(EXPORT_FORMATS))
  layout = EXPORT_FORMATS[config.export.format]
  if layout is not None and not layout[1](config.model.name):
    raise UsageError(f'export.format={config.export.format}: its layout holds '
                     f'{layout[0]} models, not model.name={config.model.name}')


def check_predict(config) -> None:
  """predict.top_k: at least 1 (--mode=predict)."""
  at_least('predict.top_k', config.predict.top_k, 1)
