"""The data-parallel step taken apart: gradients, their sum, the update.

Why do 8 emulated CPU devices train slower than 2 at the same global batch?
This times, on the devices of one process, each part of a data-parallel
SGD-momentum step of a model from models/registry.py on a fixed random batch:

  gradients         each device's gradients of its share of the batch, and
                    nothing more (no sum, no update)
  gradients_summed  the same, then one all-reduce of all the gradients as
                    one flat buffer
  step              the same, then every device updates its whole copy of
                    the parameters
  jit               the whole step as one jit program over the mesh, as the
                    trainer compiles it: XLA places the sums, and batch norm's
                    statistics span the global batch

The first three run under jax.shard_map with batch norm over each device's
own images. The variants run in turn, `--rounds` times; one JSON line per
run, then one per variant with the medians, each with its provenance
(benchmarks/provenance.py); --out also appends them to a file. Like main.py,
the script starts itself again with the malloc tunables and turns XNNPACK on.

  .venv/bin/python benchmarks/step_parts.py --devices=2 --rounds=3 \
      --out=results/speed/step_parts.jsonl
  .venv/bin/python benchmarks/step_parts.py --devices=8 --rounds=3 \
      --out=results/speed/step_parts.jsonl
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from cli import runtime

runtime.restart_with_malloc_tunables()  # before anything allocates much

from absl import app
from absl import flags
import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import optax

from models import registry

import provenance  # benchmarks/provenance.py, beside this script

VARIANTS = ('gradients', 'gradients_summed', 'step', 'jit')

flags.DEFINE_integer('devices', 2, 'Emulated CPU devices (an XLA_FLAGS count wins).')
flags.DEFINE_string('model', 'resnet18', 'A model of models/registry.py.')
flags.DEFINE_integer('image_size', 64, 'Input resolution.')
flags.DEFINE_integer('batch_size', 32, 'Global batch, split over the devices.')
flags.DEFINE_integer('steps', 8, 'Timed steps per run, after 2 untimed.')
flags.DEFINE_integer('rounds', 2, 'Runs of every variant, interleaved.')
flags.DEFINE_string('out', '', provenance.OUT_HELP)
FLAGS = flags.FLAGS


def build_steps(model, tx, mesh):
  """Each variant's jitted function of (params, batch_stats, opt_state, batch)."""
  # Imported here: it builds arrays at import, which would start the
  # backend before runtime.initialize has set the device count.
  from trainer import step_functions  # pylint: disable=g-import-not-at-top
  devices = mesh.size
  P = jax.P  # pylint: disable=invalid-name

  def gradients(params, batch_stats, batch):  # the trainer's loss and gradients
    grads, batch_stats, metrics = step_functions.compute_gradients(
        params, batch_stats, batch, 0, model=model)
    return grads, batch_stats, metrics['loss']

  def local(variant, params, batch_stats, opt_state, batch):
    grads, batch_stats, loss = gradients(params, batch_stats, batch)
    if variant != 'gradients':  # else kept per device: nothing is summed
      flat, unflatten = ravel_pytree(grads)
      grads = unflatten(jax.lax.psum(flat, 'data') / devices)
    if variant != 'step':
      return jax.tree.map(lambda g: g[None], grads), loss[None]
    updates, opt_state = tx.update(grads, opt_state, params)
    batch_stats = jax.tree.map(lambda s: jax.lax.pmean(s, 'data'), batch_stats)
    return (optax.apply_updates(params, updates), batch_stats, opt_state), loss[None]

  def whole_step(params, batch_stats, opt_state, batch):
    grads, batch_stats, loss = gradients(params, batch_stats, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), batch_stats, opt_state), loss

  steps = {'jit': jax.jit(whole_step)}
  state_specs = (P(), P(), P())
  for variant in ('gradients', 'gradients_summed', 'step'):
    outputs = (state_specs if variant == 'step' else P('data'), P('data'))
    steps[variant] = jax.jit(jax.shard_map(
        lambda *args, v=variant: local(v, *args), mesh=mesh,
        in_specs=(*state_specs, P('data')), out_specs=outputs))
  return steps


def time_variant(step, state, batch) -> dict:
  """Compile, 2 untimed steps, then FLAGS.steps timed ones; the state is
  carried on where the variant returns one."""
  def run(state):
    new_state, loss = step(*state, batch)
    jax.block_until_ready(loss)
    return new_state if isinstance(new_state, tuple) else state

  start = time.perf_counter()
  state = run(state)
  first_s = time.perf_counter() - start
  for _ in range(2):
    state = run(state)
  times, cpu_before = [], os.times()
  for _ in range(FLAGS.steps):
    start = time.perf_counter()
    state = run(state)
    times.append(time.perf_counter() - start)
  cpu_after = os.times()
  cpu_s = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system)
  step_s = float(np.median(times))
  return {'first_call_s': round(first_s, 2), 'step_s': round(step_s, 4),
          'images_per_s': round(FLAGS.batch_size / step_s, 1),
          'cpu_s_per_step': round(cpu_s / FLAGS.steps, 3)}


def main(argv):
  del argv
  results = provenance.Results(FLAGS.out)
  runtime.initialize(num_cpu_devices=FLAGS.devices, coordinator_address=None,
                     num_processes=1, process_id=0, cluster='none')
  mesh = jax.make_mesh((jax.device_count(),), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))
  if FLAGS.batch_size % mesh.size:
    raise app.UsageError(f'--batch_size={FLAGS.batch_size} does not split over '
                         f'{mesh.size} devices')
  model = registry.create_model(FLAGS.model, num_classes=1000, conv_form='by_shape',
                                image_size=FLAGS.image_size)
  shape = (FLAGS.batch_size, FLAGS.image_size, FLAGS.image_size, 3)
  images = jax.random.randint(jax.random.key(1), shape, 0, 256).astype(jnp.uint8)
  labels = jax.random.randint(jax.random.key(2), (FLAGS.batch_size,), 0, 1000)
  variables = jax.device_get(model.init(jax.random.key(0), jnp.zeros(shape)[:2], train=False))
  tx = optax.sgd(0.1, momentum=0.9)
  host_state = (variables['params'], variables.get('batch_stats', {}),
                jax.device_get(tx.init(variables['params'])))
  replicated = jax.NamedSharding(mesh, jax.P())
  split = jax.NamedSharding(mesh, jax.P('data'))
  batch = jax.device_put({'image': images, 'label': labels}, split)
  steps = build_steps(model, tx, mesh)

  results = {v: [] for v in VARIANTS}
  common = {'model': FLAGS.model, 'image_size': FLAGS.image_size,
            'batch_size': FLAGS.batch_size, 'devices': mesh.size}
  for round_index in range(FLAGS.rounds):
    for variant in VARIANTS:
      state = jax.device_put(host_state, replicated)  # a fresh copy per run
      record = time_variant(steps[variant], state, batch)
      results[variant].append(record)
      results.write({**common, 'variant': variant, 'round': round_index, **record})
  for variant, records in results.items():
    medians = {k: round(float(np.median([r[k] for r in records])), 4)
               for k in ('step_s', 'images_per_s', 'cpu_s_per_step')}
    results.write({**common, 'variant': variant, 'summary': 'median',
                   'rounds': FLAGS.rounds, **medians})


if __name__ == '__main__':
  app.run(main)
