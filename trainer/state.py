"""The train state, created directly with its target sharding."""

import math
from typing import Any, Callable

import flax
from flax import linen as nn
import jax
import jax.numpy as jnp
import optax


@flax.struct.dataclass
class TrainState:
  """Everything a step reads and writes; also what a checkpoint holds."""
  step: jax.Array  # int32 scalar: steps taken; also the data position
  params: Any
  batch_stats: Any  # BatchNorm running statistics ({} for models without)
  opt_state: Any


def _make_init_fn(model: nn.Module, tx: optax.GradientTransformation,
                  image_size: int) -> Callable[[jax.Array], TrainState]:
  def init(rng: jax.Array) -> TrainState:
    images = jnp.zeros((1, image_size, image_size, 3), jnp.float32)
    variables = model.init(rng, images, train=False)
    params = variables['params']
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      batch_stats=variables.get('batch_stats', {}),
                      opt_state=tx.init(params))
  return init


def state_shardings(model, tx, image_size: int, mesh, rules,
                    shard_update: bool = False):
  """NamedShardings of every state leaf, from the parameters' logical axes.

  Optimiser state inherits its parameter's axes because optax maps over the
  boxed (logically partitioned) parameters; scalars such as the step and
  optax counters have no axes and are replicated. With shard_update the
  optimiser state is further split over the data axis (see
  split_over_data), since only the update reads it.
  """
  boxed = jax.eval_shape(_make_init_fn(model, tx, image_size), jax.random.key(0))
  specs = nn.get_partition_spec(boxed)
  shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
  shapes = nn.meta.unbox(boxed)
  shardings = jax.tree.map(_divisible_or_replicated, shardings, shapes)
  if shard_update:
    shardings = shardings.replace(opt_state=jax.tree.map(
        split_over_data, shardings.opt_state, shapes.opt_state))
  return shardings


def split_over_data(sharding, shape):
  """`sharding` with the data axis added to the leaf's largest dimension
  that it divides (after any axes already splitting that dimension).

  Weight-update sharding (Xu et al. 2020, "Automatic Cross-Replica Sharding
  of Weight Update in Data-Parallel Training"; ZeRO stage 1): data-parallel
  replicas hold the same parameters, so each can update a 1/N share of them
  and gather the rest. A leaf with no such dimension (a scalar, an odd
  size) keeps its sharding and is updated on every replica as before. The
  choice depends only on the shape and sharding, so a parameter and its
  optimiser moments always land on the same split.
  """
  mesh = sharding.mesh
  ways = mesh.shape.get('data', 1)
  spec = [axes if isinstance(axes, tuple) else ((axes,) if axes else ())
          for axes in sharding.spec]
  spec += [()] * (len(shape.shape) - len(spec))
  if ways == 1 or any('data' in axes for axes in spec):
    return sharding
  split = lambda d: math.prod(mesh.shape[a] for a in spec[d]) * ways
  fits = [d for d in range(len(spec)) if shape.shape[d] % split(d) == 0]
  if not fits:
    return sharding
  best = max(fits, key=lambda d: (shape.shape[d] // split(d), -d))
  spec[best] = spec[best] + ('data',)
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(
      *[axes if len(axes) > 1 else (axes[0] if axes else None) for axes in spec]))


def update_shardings(shardings: TrainState, abstract: TrainState):
  """The parameters' layout while they are updated: each split over the
  data axis like its optimiser state (split_over_data)."""
  return jax.tree.map(split_over_data, shardings.params, abstract.params)


def _divisible_or_replicated(sharding, shape):
  """Drops mesh axes from dimensions they do not divide.

  A rule such as conv_out -> fsdp applies to every convolution, but a
  64-channel batch-norm scale cannot be split 128 ways; such small leaves
  stay replicated on that dimension instead of failing the whole run.
  """
  spec = list(sharding.spec) + [None] * (len(shape.shape) - len(sharding.spec))
  for dim, axes in enumerate(spec):
    if axes is None:
      continue
    names = axes if isinstance(axes, tuple) else (axes,)
    ways = 1
    for name in names:
      ways *= sharding.mesh.shape[name]
    if shape.shape[dim] % ways:
      spec[dim] = None
  return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec))


def abstract_state(model, tx, image_size: int, shardings) -> TrainState:
  """Shapes, dtypes and shardings of the state, without allocating it."""
  shapes = jax.eval_shape(
      lambda k: nn.meta.unbox(_make_init_fn(model, tx, image_size)(k)),
      jax.random.key(0))
  return jax.tree.map(
      lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
      shapes, shardings)


def create_train_state(model, tx, image_size: int, shardings,
                       seed: int) -> TrainState:
  """Initialises the state on the devices that own each shard.

  jit with out_shardings makes XLA run each initialiser where its shard lives,
  so no device ever holds a full copy of a sharded parameter.
  """
  init = _make_init_fn(model, tx, image_size)
  return jax.jit(lambda k: nn.meta.unbox(init(k)), out_shardings=shardings)(
      init_key(seed))


def init_key(seed: int) -> jax.Array:
  """The key parameters are drawn from.

  'rbg' rather than the default threefry: XLA compiles threefry's hash for
  every parameter separately, which made initialisation the slowest part of
  start-up (8 s against 2 s for a tiny ResNet on 8 CPU devices). JAX does not
  promise rbg bits independent of the sharding in general; on CPU they are,
  which test_parallelism checks through the losses of every mesh.
  """
  return jax.random.key(seed, impl='rbg')


def count_params(params) -> int:
  return sum(x.size for x in jax.tree.leaves(params))
