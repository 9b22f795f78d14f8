"""The SPMD engine: one jit-compiled train step over the whole device mesh."""

import functools
import time

from absl import logging
import jax

from trainer import memory
from trainer import mfu
from trainer import specs
from trainer import state as state_lib
from trainer import step_functions



def jit_train_step(exp):
  """The train step jitted with the state's and the batch's shardings, not
  yet lowered (tests/test_cuda_lowering.py lowers it for GPUs)."""
  return jax.jit(
      functools.partial(step_functions.train_step, model=exp.model, tx=exp.tx,
                        learning_rate_fn=exp.learning_rate_fn,
                        label_smoothing=exp.config.label_smoothing,
                        mixup_alpha=exp.config.mixup_alpha,
                        cutmix_alpha=exp.config.cutmix_alpha,
                        mixup_switch_prob=exp.config.mixup_switch_prob,
                        grad_accum_steps=exp.config.grad_accum_steps,
                        seed=exp.config.seed,
                        skip_nonfinite=exp.config.nonfinite == 'skip',
                        nan_at_step=exp.config.debug.nan_at_step,
                        param_shardings=exp.state_shardings.params,
                        data_shards=exp.mesh.shape['data'],
                        update_shardings=(
                            state_lib.update_shardings(exp.state_shardings,
                                                       exp.abstract_state)
                            if exp.config.mesh.shard_update else None)),
      in_shardings=(exp.state_shardings, exp.batch_sharding),
      out_shardings=(exp.state_shardings, None),
      donate_argnums=0)


def compile_train_step(exp):
  """The train step, compiled before the loop so its memory use is known;
  returns (the compiled step, its FLOPs when the model computes convolutions
  in XLA's form, else None)."""
  fn = jit_train_step(exp)
  batch_spec = specs.batch_spec(exp.config.batch_size, exp.config.data.image_size,
                                exp.batch_sharding)
  start = time.perf_counter()
  with exp.tracing_context():
    lowered = fn.lower(exp.abstract_state, batch_spec)
    compiled = lowered.compile()
  usage = memory.report(compiled, exp.abstract_state)
  logging.info('Compiled the train step in %.1fs; memory %s',
               time.perf_counter() - start, usage.describe())
  memory.check_fits(usage, memory.step_limit(exp.config.runtime.device_memory_gib))
  # The model's FLOPs for MFU (trainer/mfu.py) count convolutions in XLA's
  # form; in that form this program's own count is the one, with no second
  # trace.
  flops = (mfu.xla_flops(lowered, exp.config.grad_accum_steps)
           if exp.model.conv_form == 'xla' else None)
  return compiled, flops


class SpmdEngine:
  """Steps are dispatched asynchronously; metrics stay on the devices until
  collected, so the host runs ahead of the devices between logs."""

  def __init__(self, exp):
    self.batch_sharding = exp.batch_sharding
    self.step_phases = ()  # one program: XLA overlaps its phases
    self._train_step, self.flops_per_step = compile_train_step(exp)
    self._state = None
    self._pending = []

  def start(self, state, meta=None) -> None:
    del meta  # the state is all this engine needs
    self._state = state

  def step(self, batch) -> None:
    self._state, metrics = self._train_step(self._state, batch)
    self._pending.append(metrics)

  def collect_metrics(self) -> list[dict]:
    fetched, self._pending = jax.device_get(self._pending), []
    return [{k: float(v) for k, v in m.items()} for m in fetched]

  def state(self):
    return self._state

  def checkpoint_meta(self) -> dict:
    return {}

  def close(self) -> None:
    self._pending = []
