"""The pure functions of one step: loss, train step, eval step."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from trainer.state import TrainState

# ImageNet channel statistics on the 0-255 scale. Images cross from the host
# as uint8 (a quarter of the bytes of float32) and are normalised here.
RGB_MEAN = jnp.array([0.485, 0.456, 0.406]) * 255
RGB_STD = jnp.array([0.229, 0.224, 0.225]) * 255


def normalize_images(images: jax.Array) -> jax.Array:
  return (images.astype(jnp.float32) - RGB_MEAN) / RGB_STD


def soft_targets(labels: jax.Array, num_classes: int,
                 label_smoothing: float = 0.0) -> jax.Array:
  return optax.smooth_labels(jax.nn.one_hot(labels, num_classes), label_smoothing)


def cross_entropy_loss(logits: jax.Array, labels: jax.Array,
                       label_smoothing: float = 0.0) -> jax.Array:
  """Per-example softmax cross-entropy with optional label smoothing."""
  targets = soft_targets(labels, logits.shape[-1], label_smoothing)
  return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets)


def mixup(rng: jax.Array, images: jax.Array, targets: jax.Array, alpha: float):
  """Mixes each example with its neighbour in the batch (Zhang et al. 2018).

  One mixing ratio per batch, drawn from Beta(alpha, alpha); the partner is the
  next example (a roll), which needs no random permutation of a sharded batch.
  """
  ratio = jax.random.beta(rng, alpha, alpha)
  mix = lambda x: ratio * x + (1 - ratio) * jnp.roll(x, 1, axis=0)
  return mix(images), mix(targets)


def cutmix_box(rng: jax.Array, height: int, width: int, alpha: float):
  """CutMix's box (Yun et al. 2019) as timm draws it: (top, bottom, left,
  right), int32, of side fraction sqrt(1 - Beta(alpha, alpha)) around a
  uniform centre, clipped to the image."""
  ratio_rng, y_rng, x_rng = jax.random.split(rng, 3)
  side = jnp.sqrt(1 - jax.random.beta(ratio_rng, alpha, alpha))
  half_h = (height * side).astype(jnp.int32) // 2
  half_w = (width * side).astype(jnp.int32) // 2
  y = jax.random.randint(y_rng, (), 0, height)
  x = jax.random.randint(x_rng, (), 0, width)
  return (jnp.clip(y - half_h, 0, height), jnp.clip(y + half_h, 0, height),
          jnp.clip(x - half_w, 0, width), jnp.clip(x + half_w, 0, width))


def cutmix(rng: jax.Array, images: jax.Array, targets: jax.Array, alpha: float):
  """Pastes one box of the neighbour's image into each example (the same box
  for the whole batch, the partner the next example as in `mixup`); the
  targets weigh the partner's by the box's actual share of the image."""
  _, height, width, _ = images.shape
  top, bottom, left, right = cutmix_box(rng, height, width, alpha)
  rows, cols = jnp.arange(height), jnp.arange(width)
  inside = (((rows >= top) & (rows < bottom))[:, None] &
            ((cols >= left) & (cols < right))[None, :])
  images = jnp.where(inside[None, :, :, None], jnp.roll(images, 1, axis=0),
                     images)
  pasted = (bottom - top) * (right - left) / (height * width)
  targets = (1 - pasted) * targets + pasted * jnp.roll(targets, 1, axis=0)
  return images, targets


def mix_batch(rng: jax.Array, images: jax.Array, targets: jax.Array, *,
              mixup_alpha: float, cutmix_alpha: float, switch_prob: float):
  """Mixup, CutMix, or with both on one of them per batch, CutMix with
  probability switch_prob (timm's batch mode). Mixup alone draws exactly
  what it draws without CutMix."""
  if cutmix_alpha <= 0:
    return mixup(rng, images, targets, mixup_alpha)
  cut = cutmix(jax.random.fold_in(rng, 2), images, targets, cutmix_alpha)
  if mixup_alpha <= 0:
    return cut
  mixed = mixup(rng, images, targets, mixup_alpha)
  # Both computed and one kept: two elementwise passes over the batch cost
  # nothing next to the model, and a select keeps the program branch-free.
  use_cutmix = jax.random.uniform(jax.random.fold_in(rng, 3)) < switch_prob
  return tuple(jnp.where(use_cutmix, c, m) for c, m in zip(cut, mixed))


def top_k_correct(logits: jax.Array, labels: jax.Array, k: int) -> jax.Array:
  """1.0 where the label is among the k highest logits (k capped at classes)."""
  k = min(k, logits.shape[-1])
  _, top = jax.lax.top_k(logits, k)
  return jnp.any(top == labels[:, None], axis=-1).astype(jnp.float32)


def _apply(model, params, batch_stats, images, *, train: bool, dropout_rng=None):
  """Runs the model; returns logits and (updated) batch statistics."""
  variables = {'params': params}
  if batch_stats:
    variables['batch_stats'] = batch_stats
  rngs = {'dropout': dropout_rng} if dropout_rng is not None else None
  if train and batch_stats:
    logits, updates = model.apply(variables, images, train=True, rngs=rngs,
                                  mutable=['batch_stats'])
    return logits, updates['batch_stats']
  return model.apply(variables, images, train=train, rngs=rngs), batch_stats


def uses_dropout(model) -> bool:
  """Whether training draws random numbers in the model (dropout, drop path);
  a model without them gets no random stream, so its program is unchanged."""
  return (getattr(model, 'dropout_rate', 0.0) > 0 or
          getattr(model, 'drop_path_rate', 0.0) > 0)


def _micro_batches(x: jax.Array, k: int) -> jax.Array:
  """[B, ...] -> [k, B/k, ...] where micro-batch j holds examples j, j+k, ...

  Strided rather than contiguous, so that each device's contiguous share of
  the sharded batch contributes to every micro-batch and no example moves
  between devices.
  """
  return jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)


def compute_gradients(params, batch_stats, batch, step, *, model,
                      label_smoothing: float = 0.0, mixup_alpha: float = 0.0,
                      cutmix_alpha: float = 0.0, mixup_switch_prob: float = 0.5,
                      grad_accum_steps: int = 1, seed: int = 0,
                      nan_at_step: int = -1, param_hook=None, data_shards: int = 1):
  """Gradients of the mean loss over `batch`; returns (grads, batch_stats, metrics).

  The one loss-and-gradient code of both engines: SPMD calls it on the global
  batch inside one program, a parameter-server worker on its own slice.

  With grad_accum_steps = k the batch is split into k micro-batches whose
  gradients are averaged: the same gradient as one batch (for models without
  batch norm), with a k-th of the activation memory. nan_at_step >= 0 injects
  a NaN loss at that step (fault injection for tests). metrics: 'loss' and
  'accuracy' (top-1) over the batch. param_hook, if given, is applied to the
  parameters inside the differentiated function (the parameter-server
  engine taps each parameter's gradient there as backprop produces it).
  mixup_alpha, cutmix_alpha, mixup_switch_prob: see `mix_batch`; an
  emulated engine's worker mixes within its own slice.
  """
  images = normalize_images(batch['image'])
  if nan_at_step >= 0:
    images = jnp.where(step == nan_at_step, jnp.nan, images)
  labels = batch['label']
  targets = soft_targets(labels, model.num_classes, label_smoothing)
  # The step's random numbers are functions of (seed, step) alone, so a
  # resumed run draws what the uninterrupted one drew.
  step_rng = jax.random.fold_in(jax.random.key(seed), step)
  if mixup_alpha > 0 or cutmix_alpha > 0:
    images, targets = mix_batch(step_rng, images, targets,
                                mixup_alpha=mixup_alpha,
                                cutmix_alpha=cutmix_alpha,
                                switch_prob=mixup_switch_prob)
  dropout_rng = jax.random.fold_in(step_rng, 1) if uses_dropout(model) else None

  def loss_fn(p, batch_stats, images, targets, dropout_rng):
    if param_hook is not None:
      p = param_hook(p)
    logits, batch_stats = _apply(model, p, batch_stats, images, train=True,
                                 dropout_rng=dropout_rng)
    loss = optax.softmax_cross_entropy(logits.astype(jnp.float32), targets).mean()
    return loss, (logits, batch_stats)

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  if grad_accum_steps == 1:
    (loss, (logits, batch_stats)), grads = grad_fn(
        params, batch_stats, images, targets, dropout_rng)
  elif data_shards > 1 and not batch_stats:
    grads, loss, logits = _per_shard_gradients(
        grad_fn, params, images, targets, dropout_rng, grad_accum_steps)
    labels = _micro_batches(labels, grad_accum_steps).reshape(-1)
  else:
    k = grad_accum_steps

    def accumulate(carry, micro):
      grads_sum, loss_sum, batch_stats = carry
      images, targets, index = micro
      rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, index)
      (loss, (logits, batch_stats)), grads = grad_fn(params, batch_stats, images,
                                                     targets, rng)
      grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
      return (grads_sum, loss_sum + loss, batch_stats), logits

    zeros = jax.tree.map(jnp.zeros_like, params)
    (grads, loss, batch_stats), logits = jax.lax.scan(
        accumulate, (zeros, jnp.zeros(()), batch_stats),
        (_micro_batches(images, k), _micro_batches(targets, k), jnp.arange(k)))
    grads = jax.tree.map(lambda g: g / k, grads)
    loss = loss / k
    labels = _micro_batches(labels, k).reshape(-1)
    logits = logits.reshape(-1, logits.shape[-1])
  metrics = {'loss': loss, 'accuracy': top_k_correct(logits, labels, 1).mean()}
  return grads, batch_stats, metrics


def _without_data_axis(rules) -> tuple:
  """Logical axis rules with the 'data' mesh axis taken out of every
  target: inside a shard_map whose data axis is manual, a sharding
  constraint may not name it."""
  def strip(target):
    if target == 'data':
      return None
    if isinstance(target, (tuple, list)):
      kept = tuple(t for t in target if t != 'data')
      return kept[0] if len(kept) == 1 else (kept or None)
    return target
  return tuple((name, strip(target)) for name, target in rules)


def _per_shard_gradients(grad_fn, params, images, targets, dropout_rng, k: int):
  """Gradient accumulation that reduces over the data axis once: (grads,
  loss, logits of every micro-batch in order).

  A shard_map makes the mesh's data axis manual (fsdp and tensor stay
  XLA's): each data shard splits its own share of the batch into the k
  micro-batches (example j, j+k, ... of its share: together, the same
  micro-batches as `_micro_batches` of the whole batch), sums their
  gradients on its own devices, and one psum over data adds the shards.
  Without it XLA reduces the loop carry's gradient over data in every
  micro-batch, since the carry has the parameters' layout. Dropout draws
  each shard's stream from (micro-batch, shard)."""
  rules = _without_data_axis(nn.get_logical_axis_rules())

  def local(params, images, targets, rng):
    # Varying over the shards, so that each shard's gradient is its own: the
    # gradient of an invariant input would be summed over data right there,
    # in every micro-batch.
    params = jax.lax.pcast(params, 'data', to='varying')
    shard = jax.lax.axis_index('data')
    shards = jax.lax.axis_size('data')

    def accumulate(carry, micro):
      grads_sum, loss_sum = carry
      images, targets, index = micro
      micro_rng = (None if rng is None
                   else jax.random.fold_in(jax.random.fold_in(rng, index), shard))
      with nn.logical_axis_rules(rules):
        (loss, (logits, _)), grads = grad_fn(params, {}, images, targets, micro_rng)
      return (jax.tree.map(jnp.add, grads_sum, grads), loss_sum + loss), logits

    # The carry varies over the data shards, as what is added to it does.
    zeros = (jax.tree.map(jnp.zeros_like, params),
             jax.lax.pcast(jnp.zeros(()), 'data', to='varying'))
    (grads, loss), logits = jax.lax.scan(
        accumulate, zeros,
        (_micro_batches(images, k), _micro_batches(targets, k), jnp.arange(k)))
    scale = 1.0 / (k * shards)
    grads = jax.tree.map(lambda g: jax.lax.psum(g, 'data') * scale, grads)
    return grads, jax.lax.psum(loss, 'data') * scale, logits

  grads, loss, logits = jax.shard_map(
      local, in_specs=(jax.P(), jax.P('data'), jax.P('data'), jax.P()),
      out_specs=(jax.P(), jax.P(), jax.P(None, 'data')), axis_names={'data'})(
          params, images, targets, dropout_rng)
  return grads, loss, logits.reshape(-1, logits.shape[-1])


def train_step(state: TrainState, batch, *, model, tx, learning_rate_fn,
               label_smoothing: float = 0.0, mixup_alpha: float = 0.0,
               cutmix_alpha: float = 0.0, mixup_switch_prob: float = 0.5,
               grad_accum_steps: int = 1, seed: int = 0,
               skip_nonfinite: bool = False, nan_at_step: int = -1,
               param_shardings=None, update_shardings=None, data_shards: int = 1):
  """One optimiser step on a global batch; returns (state, metrics).

  metrics['finite'] is 0 when the loss or the gradients are not finite; it is
  computed on the device and read with the other metrics, so no step waits for
  the host. With skip_nonfinite such a step leaves parameters, statistics and
  optimiser state unchanged (the data position still advances).

  update_shardings (a parameter-shaped tree of shardings), if given, is the
  layout the update runs in: the summed gradients are cut into it and each
  device updates only its share of the parameters, which the step's output
  sharding then gathers again. The arithmetic is the same; only where it
  runs changes. param_shardings, the parameters' own layout, is where the
  gradients are summed first: without it XLA's sharding propagation carries
  the split back into the backward pass (it split batch norm's channels
  and gathered them again, 140 collectives more in a ResNet-18 step).
  data_shards: the mesh's data axis size, for gradient accumulation
  (compute_gradients).
  """
  params = state.params
  grads, batch_stats, metrics = compute_gradients(
      params, state.batch_stats, batch, state.step, model=model,
      label_smoothing=label_smoothing, mixup_alpha=mixup_alpha,
      cutmix_alpha=cutmix_alpha, mixup_switch_prob=mixup_switch_prob,
      grad_accum_steps=grad_accum_steps, seed=seed, nan_at_step=nan_at_step,
      data_shards=data_shards)
  if update_shardings is not None:
    if param_shardings is not None:
      grads = jax.lax.with_sharding_constraint(grads, param_shardings)
    grads = jax.lax.with_sharding_constraint(grads, update_shardings)
    params = jax.lax.with_sharding_constraint(params, update_shardings)
  grad_norm = optax.tree.norm(grads)
  finite = jnp.isfinite(metrics['loss']) & jnp.isfinite(grad_norm)
  updates, opt_state = tx.update(grads, state.opt_state, params)
  new_state = state.replace(step=state.step + 1,
                            params=optax.apply_updates(params, updates),
                            batch_stats=batch_stats, opt_state=opt_state)
  if skip_nonfinite:
    new_state = new_state.replace(**keep_if_finite(
        finite, {'params': new_state.params, 'batch_stats': batch_stats,
                 'opt_state': opt_state},
        {'params': params, 'batch_stats': state.batch_stats,
         'opt_state': state.opt_state}))
  metrics = {
      **metrics,
      'lr': learning_rate_fn(state.step),
      'grad_norm': grad_norm,
      'finite': finite.astype(jnp.float32),
  }
  return new_state, metrics


def keep_if_finite(finite: jax.Array, new, old):
  """`new` where `finite`, else `old`, leaf by leaf (nonfinite=skip)."""
  return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)


def eval_step(state: TrainState, batch, *, model):
  """Sums over the real (unmasked) examples of one eval batch."""
  images = normalize_images(batch['image'])
  labels, mask = batch['label'], batch['mask'].astype(jnp.float32)
  logits, _ = _apply(model, state.params, state.batch_stats, images, train=False)
  return {
      'loss_sum': (cross_entropy_loss(logits, labels) * mask).sum(),
      'correct': (top_k_correct(logits, labels, 1) * mask).sum(),
      'correct_top5': (top_k_correct(logits, labels, 5) * mask).sum(),
      'count': mask.sum(),
  }


def predict_step(state: TrainState, images, *, model):
  """Class probabilities, float32 [B, classes], of uint8 images in the
  evaluation view (--mode=predict)."""
  logits, _ = _apply(model, state.params, state.batch_stats, normalize_images(images),
                     train=False)
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
