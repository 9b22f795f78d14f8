"""The pure functions of one step: loss, train step, eval step."""

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


def cross_entropy_loss(logits: jax.Array, labels: jax.Array,
                       label_smoothing: float = 0.0) -> jax.Array:
  """Per-example softmax cross-entropy with optional label smoothing."""
  num_classes = logits.shape[-1]
  targets = optax.smooth_labels(jax.nn.one_hot(labels, num_classes),
                                label_smoothing)
  return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets)


def top_k_correct(logits: jax.Array, labels: jax.Array, k: int) -> jax.Array:
  """1.0 where the label is among the k highest logits (k capped at classes)."""
  k = min(k, logits.shape[-1])
  _, top = jax.lax.top_k(logits, k)
  return jnp.any(top == labels[:, None], axis=-1).astype(jnp.float32)


def _apply(model, state: TrainState, params, images, *, train: bool):
  """Runs the model; returns logits and updated batch statistics."""
  variables = {'params': params}
  if state.batch_stats:
    variables['batch_stats'] = state.batch_stats
  if train and state.batch_stats:
    logits, updates = model.apply(variables, images, train=True,
                                  mutable=['batch_stats'])
    return logits, updates['batch_stats']
  return model.apply(variables, images, train=train), state.batch_stats


def train_step(state: TrainState, batch, *, model, tx, learning_rate_fn,
               label_smoothing: float):
  """One optimiser step on a global batch; returns (state, metrics)."""
  images = normalize_images(batch['image'])
  labels = batch['label']

  def loss_fn(params):
    logits, batch_stats = _apply(model, state, params, images, train=True)
    loss = cross_entropy_loss(logits, labels, label_smoothing).mean()
    return loss, (logits, batch_stats)

  (loss, (logits, batch_stats)), grads = jax.value_and_grad(
      loss_fn, has_aux=True)(state.params)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  new_state = state.replace(step=state.step + 1,
                            params=optax.apply_updates(state.params, updates),
                            batch_stats=batch_stats, opt_state=opt_state)
  metrics = {
      'loss': loss,
      'accuracy': top_k_correct(logits, labels, 1).mean(),
      'lr': learning_rate_fn(state.step),
      'grad_norm': optax.tree.norm(grads),
  }
  return new_state, metrics


def eval_step(state: TrainState, batch, *, model):
  """Sums over the real (unmasked) examples of one eval batch."""
  images = normalize_images(batch['image'])
  labels, mask = batch['label'], batch['mask'].astype(jnp.float32)
  logits, _ = _apply(model, state, state.params, images, train=False)
  return {
      'loss_sum': (cross_entropy_loss(logits, labels) * mask).sum(),
      'correct': (top_k_correct(logits, labels, 1) * mask).sum(),
      'correct_top5': (top_k_correct(logits, labels, 5) * mask).sum(),
      'count': mask.sum(),
  }
