"""Learning-rate schedule and optimiser, both from the config."""

import math
import re
from typing import Any, NamedTuple

import jax
import ml_collections
import optax

from configs import values
from configs.values import LR_SCALINGS, LR_SCHEDULES, NONFINITE, OPTIMIZERS, at_least, one_of
from core.errors import UsageError
from models import registry


def check_config(config: ml_collections.ConfigDict) -> None:
  """The optimiser's keys: its name, rates, decay, schedule, label smoothing,
  mixup, momentum, what a non-finite step does, and the large-batch keys.
  UsageError with one line."""
  one_of('optimizer', config.optimizer, OPTIMIZERS)
  for key in ('learning_rate', 'weight_decay', 'warmup_epochs', 'momentum',
              'grad_clip_norm'):
    value = config[key]
    if not math.isfinite(value) or value < 0:
      raise UsageError(f'{key}={value!r} must be a finite number >= 0')
  at_least('warmup_steps', config.warmup_steps, 0)
  one_of('lr_scaling', config.lr_scaling, LR_SCALINGS)
  one_of('lr_schedule', config.lr_schedule, LR_SCHEDULES)
  if not 0.0 <= config.label_smoothing < 1.0:
    raise UsageError(f'label_smoothing={config.label_smoothing!r} must be in [0, 1)')
  if not math.isfinite(config.mixup_alpha) or config.mixup_alpha < 0:
    raise UsageError(f'mixup_alpha={config.mixup_alpha!r} must be >= 0 (0: off)')
  if not 0.0 <= config.momentum < 1.0:
    raise UsageError(f'momentum={config.momentum!r} must be in [0, 1)')
  one_of('nonfinite', config.nonfinite, NONFINITE)
  _check_large_batch_keys(config)


def _check_large_batch_keys(config: ml_collections.ConfigDict) -> None:
  """The step schedule, LARS's trust coefficient and layer-wise decay."""
  try:
    epochs = values.parse_step_epochs(config.lr_step_epochs)
  except ValueError:
    epochs = None
  if epochs is None or any(not math.isfinite(e) or e <= 0 for e in epochs) or \
      epochs != sorted(set(epochs)):
    raise UsageError(f'lr_step_epochs={config.lr_step_epochs!r} must be increasing '
                     f'epochs > 0, comma-separated (e.g. 30,60,80)')
  try:
    steps = [int(s) for s in config.lr_step_steps.split(',') if s.strip()]
  except ValueError:
    steps = None
  if steps is None or any(s <= 0 for s in steps) or steps != sorted(set(steps)):
    raise UsageError(f'lr_step_steps={config.lr_step_steps!r} must be increasing whole '
                     f'steps > 0, comma-separated (e.g. 6000,12000,18000), or empty')
  if not math.isfinite(config.lr_step_factor) or not 0 < config.lr_step_factor <= 1:
    raise UsageError(f'lr_step_factor={config.lr_step_factor!r} must be in (0, 1]')
  if not math.isfinite(config.lr_poly_power) or config.lr_poly_power <= 0:
    raise UsageError(f'lr_poly_power={config.lr_poly_power!r} must be a finite number > 0')
  if not math.isfinite(config.trust_coefficient) or config.trust_coefficient <= 0:
    raise UsageError(f'trust_coefficient={config.trust_coefficient!r} must be a '
                     f'finite number > 0')
  if not math.isfinite(config.layer_decay) or not 0 < config.layer_decay <= 1:
    raise UsageError(f'layer_decay={config.layer_decay!r} must be in (0, 1] (1: off)')
  if config.layer_decay != 1 and not registry.is_vit(config.model.name):
    raise UsageError(f'layer_decay={config.layer_decay!r}: layer-wise decay is for '
                     f'ViT models (their encoder blocks); model.name={config.model.name} '
                     f'has none, use layer_decay=1')


def peak_learning_rate(config: ml_collections.ConfigDict) -> float:
  """config.learning_rate is for a global batch of 256 (Goyal et al. 2017)."""
  if config.lr_scaling == 'linear':
    return config.learning_rate * config.batch_size / 256
  return config.learning_rate


def warmup_steps(config: ml_collections.ConfigDict, steps_per_epoch: int) -> int:
  if config.warmup_steps > 0:
    return config.warmup_steps
  return int(round(config.warmup_epochs * steps_per_epoch))


def create_learning_rate_fn(config: ml_collections.ConfigDict,
                            steps_per_epoch: int, total_steps: int):
  """Linear warm-up from 0 to the peak, then lr_schedule: cosine or
  polynomial decay to 0 at the last step, constant, or steps."""
  peak = peak_learning_rate(config)
  warmup = min(warmup_steps(config, steps_per_epoch), total_steps)
  if config.lr_schedule == 'constant':
    after = optax.constant_schedule(peak)
  elif config.lr_schedule == 'step':
    # Goyal et al.: the rate falls by lr_step_factor at each epoch of
    # lr_step_epochs, counted from the start of training (warm-up included);
    # BiT's fine-tuning gives steps instead (lr_step_steps).
    falls = [int(s) for s in config.lr_step_steps.split(',') if s.strip()] or [
        int(round(e * steps_per_epoch)) for e in values.parse_step_epochs(config.lr_step_epochs)]
    boundaries = {max(s - warmup, 1): config.lr_step_factor for s in falls}
    after = optax.piecewise_constant_schedule(peak, boundaries)
  elif config.lr_schedule == 'poly':
    # MLPerf's LARS ResNet-50 (power 2): peak * (1 - t)^power over the steps
    # after warm-up.
    after = optax.polynomial_schedule(peak, 0.0, config.lr_poly_power,
                                      max(total_steps - warmup, 1))
  else:
    after = optax.cosine_decay_schedule(peak, max(total_steps - warmup, 1))
  if warmup == 0:
    return after
  return optax.join_schedules(
      [optax.linear_schedule(0.0, peak, warmup), after], [warmup])


# Parameters that are not weights of a layer, by name: biases (ViT's
# attention biases are [heads, head_dim], so the rank alone would not tell),
# norm scales, ViT's position embedding and class token (excluded from weight
# decay by DeiT and the common ViT recipes).
_NO_DECAY_NAMES = ('bias', 'scale', 'pos_embedding', 'cls')


def _names(path) -> set:
  """The variable names along a tree path. A parameter-server shard keys its
  pieces 'params/a/pos_embedding[0:1]': each '/'-part of a key is a name."""
  names = set()
  for k in path:
    key = str(getattr(k, 'key', getattr(k, 'name', '')))
    names.update(part.split('[')[0] for part in key.split('/'))
  return names


def decay_mask(params):
  """Weight decay on kernels only: not on biases or norm scales, nor on
  position embeddings and class tokens, nor on anything of rank <= 1."""
  return jax.tree_util.tree_map_with_path(
      lambda path, p: p.ndim > 1 and not _names(path) & set(_NO_DECAY_NAMES), params)


_BLOCK = re.compile(r'encoderblock_(\d+)')
# Before the first encoder block: layer 0 (BEiT's and MAE's layer-wise decay).
_EMBEDDING_NAMES = frozenset({'embedding', 'pos_embedding', 'cls'})


def layer_ids(params):
  """Each ViT parameter's layer: 0 for the embeddings, i + 1 for encoder
  block i, depth + 1 for the final norm and the head."""
  paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]

  def block(path):
    for name in _names(path):
      match = _BLOCK.fullmatch(name)
      if match:
        return int(match.group(1))
    return None

  depth = 1 + max((b for b in map(block, paths) if b is not None), default=-1)

  def layer(path, _):
    b = block(path)
    if b is not None:
      return b + 1
    return 0 if _names(path) & _EMBEDDING_NAMES else depth + 1

  return jax.tree_util.tree_map_with_path(layer, params), depth


def scale_by_layer_decay(decay: float) -> optax.GradientTransformation:
  """Layer-wise learning-rate decay for fine-tuning (BEiT, MAE): layer l's
  update is multiplied by decay ** (depth + 1 - l), so the head learns at
  the full rate and the embeddings at decay ** (depth + 1)."""

  def scale(updates, params=None):
    del params
    ids, depth = layer_ids(updates)
    return jax.tree.map(lambda u, l: u * decay ** (depth + 1 - l), updates, ids)

  return optax.stateless(scale)


def _lamb(config, learning_rate_fn):
  """LAMB (You et al. 2020) with its weight decay and trust ratio both
  skipping biases and norm parameters (optax.lamb applies the trust ratio to
  every parameter)."""
  return optax.chain(
      optax.scale_by_adam(b1=config.momentum, b2=0.999, eps=1e-6),
      optax.add_decayed_weights(config.weight_decay, decay_mask),
      optax.masked(optax.scale_by_trust_ratio(), decay_mask),
      optax.scale_by_learning_rate(learning_rate_fn))


class ParamsEma(NamedTuple):
  """The exponential moving average of the parameters, after each update."""
  ema: Any


def params_ema(decay: float) -> optax.GradientTransformation:
  """Keeps ema <- decay * ema + (1 - decay) * (params + updates), starting at
  the initial parameters, and passes the updates through unchanged.

  As a part of the optimiser state it is laid out like the parameters (optax
  maps over their logical axes), split with them under mesh.shard_update and
  on the parameter servers' shards, checkpointed, and restored exactly and
  onto other meshes, with nothing of its own in any engine."""

  def init(params):
    return ParamsEma(ema=params)

  def update(updates, state, params=None):
    if params is None:
      raise ValueError('params_ema needs the parameters: tx.update(g, state, params)')
    ema = jax.tree.map(lambda e, p, u: decay * e + (1 - decay) * (p + u),
                       state.ema, params, updates)
    return updates, ParamsEma(ema=ema)

  return optax.GradientTransformation(init, update)


def _is_ema(node) -> bool:
  return isinstance(node, ParamsEma)


def _find_ema(opt_state) -> tuple[str, ParamsEma] | None:
  """(its path in `opt_state` as a checkpoint names it, e.g. '3', the
  ParamsEma), or None without one."""
  for path, node in jax.tree_util.tree_flatten_with_path(opt_state, is_leaf=_is_ema)[0]:
    if _is_ema(node):
      return jax.tree_util.keystr(path, simple=True, separator='/'), node
  return None


def ema_params(opt_state):
  """The parameters' moving average kept in `opt_state`; None without one."""
  found = _find_ema(opt_state)
  return found[1].ema if found else None


def ema_path(opt_state) -> str:
  """Where the ParamsEma sits in `opt_state`, as a checkpoint path ('3')."""
  found = _find_ema(opt_state)
  if found is None:
    raise ValueError('this optimiser state keeps no moving average (ema_decay=0)')
  return found[0]


def with_ema_of(opt_state, params):
  """`opt_state` with its moving average restarted at `params` (a run that
  starts from another run's parameters averages from those)."""
  return jax.tree.map(lambda n: ParamsEma(ema=params) if _is_ema(n) else n, opt_state,
                      is_leaf=_is_ema)


def create_optimizer(config: ml_collections.ConfigDict, learning_rate_fn,
                     clip: bool = True):
  """The optax chain; clip=False keeps clipping's place with an identity
  (same state structure) for callers that clip by a norm they compute
  themselves (the parameter-server shards)."""
  parts = []
  if config.grad_clip_norm > 0:
    parts.append(optax.clip_by_global_norm(config.grad_clip_norm) if clip
                 else optax.identity())
  if config.optimizer == 'sgd':
    # L2 regularisation added to the gradient, as in the ResNet recipes.
    if config.weight_decay > 0:
      parts.append(optax.add_decayed_weights(config.weight_decay, decay_mask))
    parts.append(optax.sgd(learning_rate_fn, momentum=config.momentum,
                           nesterov=config.nesterov))
  elif config.optimizer == 'lars':
    # You et al. 2017, as the MLPerf ResNet-50 references run it: weight
    # decay and the trust ratio skip biases and batch-norm parameters.
    parts.append(optax.lars(learning_rate_fn, weight_decay=config.weight_decay,
                            weight_decay_mask=decay_mask,
                            trust_coefficient=config.trust_coefficient,
                            trust_ratio_mask=decay_mask, momentum=config.momentum,
                            nesterov=config.nesterov))
  elif config.optimizer == 'lamb':
    parts.append(_lamb(config, learning_rate_fn))
  else:
    parts.append(optax.adamw(learning_rate_fn, b1=config.momentum, b2=0.999,
                             weight_decay=config.weight_decay, mask=decay_mask))
  if config.layer_decay != 1.0:
    parts.append(scale_by_layer_decay(config.layer_decay))
  if config.ema_decay > 0:
    parts.append(params_ema(config.ema_decay))  # last: it sees the final updates
  return optax.chain(*parts)
