"""Learning-rate schedule and optimiser, both from the config."""

import jax
import ml_collections
import optax


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
  """Linear warm-up from 0, then cosine decay to 0 (or constant)."""
  peak = peak_learning_rate(config)
  warmup = min(warmup_steps(config, steps_per_epoch), total_steps)
  if config.lr_schedule == 'constant':
    after = optax.constant_schedule(peak)
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
  else:
    parts.append(optax.adamw(learning_rate_fn, b1=config.momentum, b2=0.999,
                             weight_decay=config.weight_decay, mask=decay_mask))
  return optax.chain(*parts)
