"""The workers' gradient programs: the shared loss code on each worker's slice.

Synchronous mode compiles one program over the worker devices in which each
device computes the gradients of its own slice with its own copy of the
parameters, with no collective: gradients leave every device separately, as
they would leave separate machines. (One program rather than one per device:
XLA compiles it once, where per-device executables cost a compile each.)
Asynchronous workers need independent programs, so each gets its own
single-device executable, called from its own thread.
"""

import dataclasses
import functools

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from core.errors import UsageError
from trainer import memory
from trainer import specs
from trainer import step_functions
from trainer.engines.emulation import wire

AXIS = 'workers'


def local_gradients(exp, on_gradient=None):
  """(params, batch_stats, batch, step) -> (grads, batch_stats, metrics) of a
  worker's slice, with the SPMD engine's loss code and settings.

  on_gradient(worker, leaf, gradient), if given, is called on the host with
  each parameter leaf's gradient as soon as backprop has produced it, while
  the rest of the backward pass goes on (ps.overlap).
  """
  config = exp.config
  compute = functools.partial(
      step_functions.compute_gradients, model=exp.model,
      label_smoothing=config.label_smoothing, mixup_alpha=config.mixup_alpha,
      cutmix_alpha=config.cutmix_alpha, mixup_switch_prob=config.mixup_switch_prob,
      grad_accum_steps=config.grad_accum_steps, seed=config.seed,
      nan_at_step=config.debug.nan_at_step,
      param_hook=None if on_gradient is None else functools.partial(
          _tap_gradients, on_gradient=on_gradient))

  def fn(params, batch_stats, batch, step):
    grads, batch_stats, metrics = compute(params, batch_stats, batch, step)
    sumsq = sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads))
    return grads, batch_stats, {**metrics, 'grad_sumsq': sumsq}
  return fn


def wire_program(exp, layout, on_gradient=None):
  """(state vector, batch, step) -> (gradients-and-statistics vector, metrics):
  local_gradients with the worker's variables packed as on the wire (wire.py)."""
  fn = local_gradients(exp, on_gradient)
  abstract = exp.abstract_state
  treedefs = (jax.tree.structure(abstract.params),
              jax.tree.structure(abstract.batch_stats))

  def on_wire(vector, batch, step):
    params, batch_stats = layout.unpack(vector, *treedefs)
    grads, batch_stats, metrics = fn(params, batch_stats, batch, step)
    return layout.pack(grads, batch_stats), metrics
  return on_wire


def _tap_gradients(params, on_gradient):
  """Identity on the parameters whose backward pass hands each leaf's
  gradient to `on_gradient` on the host, the moment it is computed."""
  leaves, treedef = jax.tree.flatten(params)

  def tap(index, leaf):
    @jax.custom_vjp
    def identity(x):
      return x

    def backward(_, gradient):
      jax.debug.callback(on_gradient, jax.lax.axis_index(AXIS), index, gradient)
      return (gradient,)

    identity.defvjp(lambda x: (x, None), backward)
    return identity(leaf)

  return jax.tree.unflatten(treedef, [tap(i, x) for i, x in enumerate(leaves)])


# Running statistics that the emulated engines combine across workers by
# averaging them.
_AVERAGEABLE_STATS = ('mean', 'var')


def check_batch_stats(config, batch_stats) -> None:
  """UsageError for batch statistics that are not running averages."""
  for path in wire.flat_variables({}, batch_stats):
    if path.rsplit('/', 1)[-1] not in _AVERAGEABLE_STATS:
      raise UsageError(
          f'engine={config.engine} cannot keep {config.model.name}\'s batch '
          f'statistic {path}: it combines workers\' running averages '
          f'({", ".join(_AVERAGEABLE_STATS)}) only; use engine=spmd')


def worker_devices(num_workers: int) -> list:
  """The N_w worker devices: the last ones. On a CPU-only machine the first
  device is also the host's, where shards compute and host callbacks land
  (ps.overlap)."""
  devices = jax.devices()
  return devices[len(devices) - num_workers:]


def worker_mesh(devices) -> jax.sharding.Mesh:
  return jax.make_mesh((len(devices),), (AXIS,),
                       axis_types=(jax.sharding.AxisType.Explicit,), devices=devices)


def _vector(layout, sharding):
  return jax.ShapeDtypeStruct((layout.size,), wire.DTYPE, sharding=sharding)


def _compile_per_worker(fn, exp, mesh, variables, batch_size: int):
  """fn(*variables, batch, step) on each worker's slice of the global
  `batch_size`, in one program over `mesh`, its outputs stacked [N_w, ...];
  `variables`: abstract and replicated."""
  P = jax.sharding.PartitionSpec

  def per_worker(*args):
    return jax.tree.map(lambda x: x[None], fn(*args))

  # check_vma=False: with it, JAX would mark the replicated parameters as
  # varying inside and transpose that into an all-reduce of the gradients,
  # which is exactly the collective a parameter server replaces.
  program = jax.jit(jax.shard_map(
      per_worker, mesh=mesh, in_specs=(P(),) * len(variables) + (P(AXIS), P()),
      out_specs=P(AXIS), check_vma=False))
  return program.lower(
      *variables,
      specs.batch_spec(batch_size, exp.config.data.image_size,
                       jax.sharding.NamedSharding(mesh, P(AXIS))),
      jax.ShapeDtypeStruct((), np.int32, sharding=jax.sharding.NamedSharding(mesh, P()))
  ).compile()


def compile_sync_program(exp, mesh, layout, on_gradient=None, batch_size: int = 0):
  """All workers' gradients in one program: (state vector replicated, batch,
  step) -> (vectors stacked [N_w, size], metrics stacked [N_w]).

  batch_size: the global batch it is compiled for (0: the config's).
  """
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return _compile_per_worker(wire_program(exp, layout, on_gradient), exp, mesh,
                             (_vector(layout, replicated),),
                             batch_size or exp.config.batch_size)


def compile_tree_program(exp, mesh, batch_size: int):
  """The sync program's gradients with the parameters as their tree, not
  packed on the wire: (params, batch_stats replicated, batch, step) ->
  (gradients, statistics and metrics stacked [N_w, ...]). What an SPMD
  step computes on each device's share of a data-parallel batch, without
  its collectives and update: the compute a mesh plan costs
  (probe/compute.py)."""
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  on_mesh = lambda tree: jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), tree)
  abstract = exp.abstract_state
  return _compile_per_worker(local_gradients(exp), exp, mesh,
                             (on_mesh(abstract.params), on_mesh(abstract.batch_stats)),
                             batch_size)


def compile_async_programs(exp, devices, layout, per_worker_batch: int):
  """One single-device executable per worker device (compiled in turn)."""
  fn = jax.jit(wire_program(exp, layout))
  programs = []
  for device in devices:
    one = jax.sharding.SingleDeviceSharding(device)
    programs.append(fn.lower(
        _vector(layout, one),
        specs.batch_spec(per_worker_batch, exp.config.data.image_size, one),
        jax.ShapeDtypeStruct((), np.int32, sharding=one)).compile())
  return programs


# What to change when a worker's program does not fit its device.
_MEMORY_REMEDY = (
    'Every worker holds a whole copy of the parameters: lower the per-worker '
    'batch (batch_size, more workers with network.num_workers, or grad_accum_steps), '
    'recompute activations (model.remat=full), or shard the parameters with '
    'engine=spmd and mesh.fsdp')


def check_memory(exp, compiled, layout, *, opt_state_bytes: int = 0,
                 resident_bytes: int = 0,
                 what: str = "the parameter-server workers' gradient program",
                 remedy: str = _MEMORY_REMEDY) -> None:
  """UsageError when a worker's compiled program does not fit its device's
  memory (memory.step_limit: runtime.device_memory_gib, else what the device
  reports, else on a CPU the host's memory shared by the process's devices).

  The same check as the SPMD engine's, made when the engine is created, so a
  run that would not fit stops before anything is written. A worker holds
  its variables (the wire vector); a parameter-server worker no optimiser
  state (opt_state_bytes 0: it lives on the shards, in host memory).
  resident_bytes: what the device keeps meanwhile that the program does not
  take as an argument.
  """
  itemsize = np.dtype(wire.DTYPE).itemsize
  params_bytes = layout.offsets[layout.num_params] * itemsize
  usage = memory.program_report(
      compiled, params=params_bytes, opt_state=opt_state_bytes,
      batch_stats=layout.size * itemsize - params_bytes)
  usage = dataclasses.replace(usage, arguments=usage.arguments + resident_bytes)
  logging.info('%s: memory %s', what[0].upper() + what[1:], usage.describe())
  memory.check_fits(usage, memory.step_limit(exp.config.runtime.device_memory_gib),
                    what=what, remedy=remedy)


def from_pieces(pieces, sharding, shape=None) -> jax.Array:
  """One array over the workers from each worker's piece, already on its
  device; shape: the global one (default: a piece's, for a replicated array
  whose every worker holds its own copy)."""
  return jax.make_array_from_single_device_arrays(
      shape or pieces[0].shape, sharding, list(pieces))


def local_shard(array: jax.Array, device) -> jax.Array:
  """The single-device piece of a worker-sharded array that lives on `device`.

  Call it from one thread: jax builds `addressable_shards` lazily, and two
  threads asking at once for the first time can see a partial list.
  """
  for shard in array.addressable_shards:
    if shard.device == device:
      return shard.data
  raise ValueError(f'no piece of the array on {device}')
