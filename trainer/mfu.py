"""Model FLOPs utilisation: the model's FLOPs per second over the devices' peak.

Both figures come from the run itself. The model's FLOPs are XLA's cost
analysis of the whole (unpartitioned) train step with every convolution in
XLA's own form: the patches form of models/conv_forms.py also multiplies the
zero padding, and a faster form must not count as more work. The peak is a
jitted matmul of the model's dtype, one per device, timed on the same devices
(on CPU, emulated devices share the host's cores, so it is the machine's peak).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from trainer import specs
from trainer import step_functions
from core import timing

# Matmul sides to try per platform: large enough to reach the peak, small
# enough to time in well under a second.
_PEAK_SIDES = {'cpu': (1024,)}
_PEAK_SIDES_ACCELERATOR = (4096, 8192)


def train_step_flops(exp) -> float:
  """FLOPs of one global train step, XLA's count, convolutions in XLA's form."""
  model = exp.model
  if hasattr(model, 'conv_form'):
    model = model.clone(conv_form='xla')
  fn = jax.jit(functools.partial(
      step_functions.train_step, model=model, tx=exp.tx,
      learning_rate_fn=exp.learning_rate_fn,
      grad_accum_steps=exp.config.grad_accum_steps))
  batch_spec = specs.batch_spec(exp.config.batch_size, exp.config.data.image_size)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                          exp.abstract_state)
  with exp.tracing_context():
    return xla_flops(fn.lower(abstract, batch_spec), exp.config.grad_accum_steps)


def step_flops(exp, engine) -> float:
  """FLOPs of one global train step: the engine's own count when it has one
  (the SPMD engine with XLA's convolutions: no second trace), else
  train_step_flops(exp)."""
  return getattr(engine, 'flops_per_step', None) or train_step_flops(exp)


def xla_flops(program, grad_accum_steps: int = 1) -> float:
  """XLA's FLOPs of a program's cost analysis: of the whole program when it
  is lowered (not yet partitioned), of one device's part when compiled.

  XLA counts a loop's body once, and a step of k micro-batches runs its
  gradient in a loop of k (trainer/step_functions.py): the step's FLOPs are
  k times the count, less k - 1 optimiser updates counted too many, which
  are elementwise and a small share beside the gradient's matmuls."""
  return _cost_analysis(program, 'flops') * grad_accum_steps


def xla_bytes_accessed(program, grad_accum_steps: int = 1) -> float:
  """XLA's bytes read and written by a program's ops (its cost analysis),
  the loop of k micro-batches counted k times as xla_flops counts it: what
  a device's memory moves, beside what its arithmetic does."""
  return _cost_analysis(program, 'bytes accessed') * grad_accum_steps


def _cost_analysis(program, key: str) -> float:
  cost = program.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0]
  return float(cost.get(key, 0.0))


def measured_peak_flops(devices, dtype, repeats: int = 10) -> float:
  """FLOP/s of the devices together: one square matmul per device at once,
  the fastest of `repeats` runs (a peak: what the machine reaches at best;
  on a shared CPU the median of a few runs varied by up to 40%)."""
  mesh = jax.sharding.Mesh(np.array(devices), ('d',))
  sharding = jax.sharding.NamedSharding(mesh, jax.P('d'))
  sides = _PEAK_SIDES.get(devices[0].platform, _PEAK_SIDES_ACCELERATOR)
  best = 0.0
  for n in sides:
    a = jax.device_put(jnp.ones((len(devices), n, n), dtype), sharding)
    matmul = jax.jit(lambda a: jnp.einsum('dij,djk->dik', a, a))
    seconds = timing.best_s(lambda: jax.block_until_ready(matmul(a)), repeats)
    best = max(best, len(devices) * 2 * n**3 / seconds)
  return best


def local_peak_times_processes(devices, dtype, repeats: int) -> float:
  """The peak of all `devices`: measured on this process's share of them
  (no other process need take part) and scaled by the process count."""
  local = [d for d in devices if d.process_index == jax.process_index()]
  return measured_peak_flops(local, dtype, repeats) * jax.process_count()


class Utilization:
  """A run's model FLOPs per step and its devices' peak, measured once at
  the start; `of(step_time_s)` is the MFU of a step that took that long."""

  def __init__(self, exp, engine):
    self.flops_per_step = step_flops(exp, engine)
    # 3 runs, not bench's 10 before and 10 after: a logged figure is not
    # worth the 1.4 s more that every run's start-up took on a 2-core CPU.
    self.peak_flops = local_peak_times_processes(list(exp.mesh.devices.flat),
                                                 exp.model.dtype, repeats=3)

  def of(self, step_time_s: float) -> float:
    return mfu(self.flops_per_step, step_time_s, self.peak_flops)


def mfu(flops_per_step: float, step_time_s: float, peak_flops: float) -> float:
  """The fraction of the peak that the model's FLOPs reach."""
  if step_time_s <= 0 or peak_flops <= 0:
    return 0.0
  return flops_per_step / step_time_s / peak_flops
