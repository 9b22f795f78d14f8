"""Timers of the emulated workers' own work, for the planner and the study.

`ComputeTimer` times the workers' gradient program (T_C) as both emulated
engines compile it; `host_copies_s` one worker's host-side copies of its
wire vector; `link_chunk_bytes` what a paced link copies before it books
the bytes. None of them looks at an engine's step times.
"""

import jax
import numpy as np

from core import timing
from core import units
from trainer import state as state_lib
from trainer.engines.emulation import link
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers


def layout(exp) -> wire.Layout:
  return wire.Layout(wire.flat_variables(exp.abstract_state.params,
                                         exp.abstract_state.batch_stats))


def initial_vector(exp, layout_) -> np.ndarray:
  """The model's initial variables as a worker receives them (wire.py)."""
  state = jax.device_get(state_lib.create_train_state(
      exp.model, exp.tx, exp.config.data.image_size, exp.state_shardings,
      exp.config.seed))
  return layout_.pack_host(state.params, state.batch_stats)


class ComputeTimer:
  """The workers' gradient program for N_w workers, compiled for one
  per-worker batch, with its inputs on the devices: timed on demand (the
  study times it before and after each cell without compiling it again)."""

  def __init__(self, exp, num_workers: int, per_worker_batch: int, vector=None):
    devices = jax.devices()[len(jax.devices()) - num_workers:]
    mesh = workers.worker_mesh(devices)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    if vector is None:
      vector = jax.device_put(initial_vector(exp, layout(exp)), replicated)
    self.vector = vector  # the workers' variables (wire.py), replicated
    global_batch, size = per_worker_batch * num_workers, exp.config.data.image_size
    self.program = workers.compile_sync_program(exp, mesh, layout(exp),
                                                batch_size=global_batch)
    rng = np.random.default_rng(per_worker_batch)
    self._batch = jax.device_put({
        'image': rng.integers(0, 256, (global_batch, size, size, 3), np.uint8),
        'label': rng.integers(0, 2, (global_batch,), np.int32)},
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(workers.AXIS)))
    self._step = jax.device_put(np.int32(0), replicated)

  def median_s(self, repeats: int) -> float:
    return timing.median_s(lambda: jax.block_until_ready(
        self.program(self.vector, self._batch, self._step)), repeats)


def host_copies_s(exp, repeats: int = 5) -> dict:
  """One worker's host-side copies of a step, as the engine makes them.

  device_s: its wire vector off the device and back onto it, before the
  push and after the pull. per_direction_s: each variable into the shards'
  buffers, or back (so per-variable overheads count); the link carries
  those bytes while they are copied.
  """
  device = jax.devices()[-1]
  layout_ = layout(exp)
  host = initial_vector(exp, layout_)
  on_device = jax.device_put(host, device)
  staging, buffers = layout_.empty(), {p: np.empty_like(v) for p, v in
                                      layout_.views(host).items()}
  off = timing.median_s(lambda: np.asarray(jax.device_get(on_device)), repeats)
  on = timing.median_s(lambda: jax.block_until_ready(
      jax.device_put(staging, device, may_alias=False)), repeats)
  def copy_out():
    for path, view in layout_.views(host).items():
      np.copyto(buffers[path], view)
  def copy_in():
    for path, view in layout_.views(staging).items():
      np.copyto(view, buffers[path])
  return {'device_s': off + on,
          'per_direction_s': max(timing.median_s(copy_out, repeats), timing.median_s(copy_in, repeats))}


def link_chunk_bytes(bandwidth_gbps: float) -> int:
  """The bytes the emulated link copies before it books them (link.py's
  chunk at this bandwidth); 0 for an unlimited link."""
  return link.chunk_bytes(units.gbps_to_bytes_per_s(bandwidth_gbps))
