"""Real train steps of mesh configurations on this job's devices: what a
mesh plan's close calls are settled by (plan.time_steps) and what
benchmarks/mesh_check.py holds every prediction against.

Each configuration (a plan row's mesh, ZeRO-1, remat and accumulation) is
compiled as the trainer compiles it (at XLA's usual optimisation, not the
plan's level 0), its state initialised on the devices, and `steps` steps
timed on one random batch after two untimed ones; the state is freed before
the next configuration, so one device holds one configuration at a time.
"""

import jax
import numpy as np

from core import timing
from planner import mesh_candidates as mc
from trainer import experiment
from trainer import memory
from trainer import specs
from trainer import state as state_lib
from trainer.engines import spmd


def time_configuration(config, row: dict, steps: int, num_classes: int) -> dict:
  """{'step_s' (the median), 'steps_s', 'peak_bytes' (XLA's analysis, as the
  trainer reports it), 'live_peak_bytes' (the runtime's, None where it keeps
  none)} of `steps` real steps of `row`'s configuration of `config`."""
  run_config = config.copy_and_resolve_references()
  run_config.update_from_flattened_dict({k: row[k] for k in mc.CONFIG_KEYS})
  exp = experiment.build_without_data(run_config, num_classes)
  with exp.tracing_context():
    compiled = spmd.jit_train_step(exp).lower(
        exp.abstract_state, specs.batch_spec(config.batch_size, config.data.image_size,
                                             exp.batch_sharding)).compile()
    state = state_lib.create_train_state(exp.model, exp.tx, config.data.image_size,
                                         exp.state_shardings, config.seed)
  host = specs.random_batch(config.batch_size, config.data.image_size,
                            np.random.default_rng(0), num_classes)
  batch = {k: jax.make_array_from_callback(v.shape, exp.batch_sharding, lambda i, v=v: v[i])
           for k, v in host.items()}
  holder = [state]
  del state  # the holder's is the only reference: each step replaces it

  def one_step():
    holder[0], metrics = compiled(holder[0], batch)
    jax.block_until_ready((holder[0], metrics))

  one_step()  # the first step after the state's creation, beside timed_runs's own untimed one
  times = timing.timed_runs(one_step, steps)
  stats = jax.local_devices()[0].memory_stats()
  return {'step_s': float(np.median(times)), 'steps_s': [float(t) for t in times],
          'peak_bytes': memory.report(compiled, exp.abstract_state).peak,
          'live_peak_bytes': stats.get('peak_bytes_in_use') if stats else None}


def time_configurations(config, rows: list[dict], steps: int, num_classes: int) -> dict:
  """{row name: time_configuration's figures} for each of `rows`, in turn."""
  return {row['name']: time_configuration(config, row, steps, num_classes) for row in rows}
