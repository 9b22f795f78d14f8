"""The named model's compute on the devices, per per-device batch.

What is timed is the planner's T_C (planner/measure.py): the
workers' gradient program (the emulation floor's, trainer/engines/emulation/), forward
and backward passes of the configured model on each device's own batch,
with no collective and no update; and beside it the same gradients with
the parameters as their tree rather than packed in one vector on the wire
(tree_compute_s), as an SPMD step holds them: what a mesh plan costs a
step's compute from (planner/mesh_from_probe.py). Every device of every process runs it at
once, as in training: where devices share a machine's cores, memory or
power, the time shows it. A batch is kept only if its program fits the
device's memory (runtime.device_memory_gib, else what the device reports)
on every process; larger ones are not tried.
"""

from concurrent import futures
import functools

from absl import logging
import jax
import numpy as np
import optax

from probe import processes
from trainer import memory
from trainer import mfu
from trainer import specs
from trainer import state as state_lib
from core import timing
from trainer.engines import emulation


def _layout(exp):
  return emulation.layout(exp)


def _initial_variables(exp, device):
  """The model's initial (params, batch_stats) on the host, made on
  `device` (this process's own: the run's mesh spans other processes)."""
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, exp.config.data.image_size,
      jax.sharding.SingleDeviceSharding(device), exp.config.seed))
  return state.params, state.batch_stats


def sweep(exp, devices, batches, repeats: int, capacity_bytes: int | None) -> list[dict]:
  """[{'per_device_batch', 'compute_s', 'tree_compute_s', 'peak_bytes',
  'flops'}] for each batch that fits, in increasing order; `devices`: this
  process's, all computing at once."""
  layout = _layout(exp)
  mesh = emulation.worker_mesh(devices)
  replicated = jax.sharding.NamedSharding(mesh, jax.P())
  split = jax.sharding.NamedSharding(mesh, jax.P(emulation.worker_axis()))
  variables = _initial_variables(exp, devices[0])
  vector = jax.device_put(layout.pack_host(*variables), replicated)
  tree = jax.device_put(variables, replicated)
  step = jax.device_put(np.int32(0), replicated)
  n = len(devices)
  with futures.ThreadPoolExecutor(min(2 * len(batches), 4)) as pool:
    programs = list(pool.map(lambda b: emulation.compile_sync_program(
        exp, mesh, layout, b * n), batches))
    tree_programs = list(pool.map(lambda b: emulation.compile_tree_program(
        exp, mesh, b * n), batches))
  points = []
  for b, program, tree_program in zip(batches, programs, tree_programs):
    peak = memory.report(program, exp.abstract_state).peak
    if not processes.all_agree(capacity_bytes is None or peak <= capacity_bytes):
      logging.info('probe: per-device batch %d needs %.2f GiB, more than a device holds: '
                   'larger batches are not tried', b, peak / memory.GIB)
      break
    rng = np.random.default_rng(b)
    batch = jax.device_put(specs.random_batch(b * n, exp.config.data.image_size, rng), split)
    processes.barrier()
    t = timing.median_s(lambda: jax.block_until_ready(program(vector, batch, step)), repeats)
    processes.barrier()
    t_tree = timing.median_s(
        lambda: jax.block_until_ready(tree_program(*tree, batch, step)), repeats)
    # Its FLOPs let a mesh plan cost other programs of the model at the
    # rate these devices reach (planner/mesh_from_probe.py); unpacking and
    # packing the wire's vector adds none, only copies.
    points.append({'per_device_batch': b, 'compute_s': t, 'tree_compute_s': t_tree,
                   'peak_bytes': peak, 'flops': mfu.xla_flops(program)})
    logging.info('probe: per-device batch %d: %.4f s (%.4f s as a tree), %.1f images/s per '
                 'device', b, t, t_tree, b / t)
  return points


def update_s(exp, devices, repeats: int) -> float:
  """The optimiser's update of the model's parameters (optax's update and
  its application, as a train step ends), on every device of `devices` at
  once: what a data-parallel step adds to the gradients' compute."""
  mesh = emulation.worker_mesh(devices)
  replicated = jax.sharding.NamedSharding(mesh, jax.P())
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, exp.config.data.image_size,
      jax.sharding.SingleDeviceSharding(devices[0]), exp.config.seed))
  params, opt_state = jax.device_put((state.params, state.opt_state), replicated)
  grads = jax.device_put(jax.tree.map(lambda p: np.full(p.shape, 1e-3, p.dtype), state.params),
                         replicated)

  # Parameters and optimiser state donated, as the trainer's step donates
  # its state: the update then writes them in place rather than into new
  # buffers, which a CPU device pays for measurably.
  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def update(params, opt_state, grads):
    updates, opt_state = exp.tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  held = [params, opt_state]
  del params, opt_state  # the holder's are the only references: each update replaces them

  def one_update():
    held[0], held[1] = update(held[0], held[1], grads)
    jax.block_until_ready(held)

  processes.barrier()
  return timing.median_s(one_update, repeats)
