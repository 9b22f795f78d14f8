"""Every worker's update of the summed gradients, on its own device.

One program over the worker devices with no collective (as the gradient
program, trainer/engines/emulation/workers.py): each device reads its own
copy of the summed vector, divides it by N_w and applies the configured
optax chain (clipping included) to its own copy of the parameters and
optimiser state. All copies receive the same sum and run the same
arithmetic, so they stay identical without being compared, as replicas of
a real all-reduce job do.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trainer import memory
from trainer import step_functions
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers

P = jax.sharding.PartitionSpec

_MEMORY_REMEDY = (
    'Every worker holds a whole copy of the parameters and of the optimiser '
    'state: lower the per-worker batch (batch_size, more workers with '
    'network.num_workers, or grad_accum_steps), recompute activations '
    '(model.remat=full), or shard the state with engine=spmd and mesh.fsdp')


def replicated_spec(tree, sharding):
  """ShapeDtypeStructs of `tree`'s leaves, each with `sharding`."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                      tree)


def compile_update_program(exp, mesh, layout):
  """(vector, opt_state, summed [N_w, size], loss, step) -> (vector,
  opt_state, grad_norm, finite), each output on every worker's device.

  vector: the worker's parameters and batch statistics on the wire
  (wire.py); summed: each worker's all-reduced gradients-and-statistics
  vector; loss: the step's mean loss (for nonfinite=skip).
  """
  config, abstract = exp.config, exp.abstract_state
  tx, num_workers = exp.tx, mesh.size
  skip_nonfinite = config.nonfinite == 'skip'
  treedefs = (jax.tree.structure(abstract.params),
              jax.tree.structure(abstract.batch_stats))

  def per_worker(vector, opt_state, summed, loss):
    params, old_stats = layout.unpack(vector, *treedefs)
    grads, stats = layout.unpack(summed[0] / num_workers, *treedefs)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new = {'params': optax.apply_updates(params, updates), 'batch_stats': stats,
           'opt_state': new_opt_state}
    if skip_nonfinite:  # as the SPMD step: nothing of a nonfinite step is kept
      new = step_functions.keep_if_finite(
          finite, new, {'params': params, 'batch_stats': old_stats,
                        'opt_state': opt_state})
    return (layout.pack(new['params'], new['batch_stats']), new['opt_state'],
            grad_norm, finite.astype(jnp.float32))

  # check_vma=False: every input but `summed` is replicated, and each
  # device computes on its own copy; JAX must not insert collectives.
  program = jax.jit(jax.shard_map(
      per_worker, mesh=mesh, in_specs=(P(), P(), P(workers.AXIS), P()),
      out_specs=P(), check_vma=False), donate_argnums=(0, 1))
  replicated = jax.sharding.NamedSharding(mesh, P())
  vector = jax.ShapeDtypeStruct((layout.size,), wire.DTYPE, sharding=replicated)
  return program.lower(
      vector, replicated_spec(abstract.opt_state, replicated),
      jax.ShapeDtypeStruct((num_workers, layout.size), wire.DTYPE,
                           sharding=jax.sharding.NamedSharding(mesh, P(workers.AXIS))),
      jax.ShapeDtypeStruct((), np.float32, sharding=replicated)).compile()


def check_memory(exp, gradient_program, update_program, layout) -> None:
  """UsageError when a worker's device cannot hold what it keeps: its
  variables and optimiser state, resident through both programs, plus
  either program's own arguments and temporaries."""
  opt_state = memory.global_bytes(exp.abstract_state.opt_state)
  for name, program, resident in (('gradient', gradient_program, opt_state),
                                  ('update', update_program, 0)):
    # The gradient program does not take the optimiser state, but the
    # device keeps it meanwhile.
    workers.check_memory(exp, program, layout, opt_state_bytes=opt_state,
                         resident_bytes=resident,
                         what=f"the all-reduce workers' {name} program",
                         remedy=_MEMORY_REMEDY)
