"""Checks of the keys the training loop reads: where it starts, its cadences
and its evaluations.

trainer/train.py, trainer/init_from.py and trainer/evaluate.py read them, but
the first and the last start a JAX backend when imported (their compiled
steps' constants), and these checks run before the runtime starts
(cli/validation.py), without loading orbax for one key. UsageError with
one line that names the key.
"""

import math

from configs.values import EVAL_WEIGHTS, at_least, one_of
# init.weights_format: trainer/init_weights.py's layouts, and auto.
WEIGHT_FORMATS = ('auto', 'big_vision', 'timm', 'keras')
from core.errors import UsageError


def check_start(config) -> None:
  """init.checkpoint_step: -1 (the latest) or a step. Whether
  init.from_workdir exists is checked when it is read: only a run without a
  checkpoint of its own reads it (trainer/init_from.py)."""
  at_least('init.checkpoint_step', config.init.checkpoint_step, -1)
  one_of('init.weights_format', config.init.weights_format, WEIGHT_FORMATS)
  if config.init.from_weights and config.init.from_workdir:
    raise UsageError(f'init.from_weights={config.init.from_weights} and '
                     f'init.from_workdir={config.init.from_workdir}: a run starts '
                     'from one of them; clear the other')


def check_cadences(config) -> None:
  """Progress lines, evaluations and checkpoints: how often, how many kept."""
  at_least('log_every_steps', config.log_every_steps, 1)
  at_least('eval_every_steps', config.eval_every_steps, 0)
  at_least('checkpoint.every_steps', config.checkpoint.every_steps, 1)
  at_least('checkpoint.every_minutes', config.checkpoint.every_minutes, 0.0)
  at_least('checkpoint.keep', config.checkpoint.keep, 1)


def check_evaluation(config) -> None:
  """Which data an evaluation reads and which weights it evaluates (the
  moving average that ema weights need)."""
  if config.eval.dataset and config.data.source != 'tfds':
    raise UsageError(f'eval.dataset={config.eval.dataset!r} names a tfds data set, '
                     f"but data.source={config.data.source!r}; for folder data "
                     'set eval.data_dir (and eval.split) instead')
  at_least('eval.batch_size', config.eval.batch_size, 0)
  one_of('eval.weights', config.eval.weights, EVAL_WEIGHTS)
  if not math.isfinite(config.ema_decay) or not 0 <= config.ema_decay < 1:
    raise UsageError(f'ema_decay={config.ema_decay!r} must be in [0, 1) (0: no moving '
                     f'average)')
  if config.eval.weights == 'ema' and not config.ema_decay:
    raise UsageError("eval.weights='ema': this run keeps no moving average of its "
                     'weights (ema_decay=0); train with ema_decay > 0, or use raw')
