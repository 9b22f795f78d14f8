"""What one data-parallel step pays whatever its bytes: its fixed cost.

A tiny model (an MLP of TINY_LAYERS float32 units, a few kB of parameters)
takes a data-parallel SGD step: each device computes the gradients of its
TINY_BATCH examples, the gradients are averaged over every device of every
process (one all-reduce of a few kB, latency-bound), and each device
updates its copy. The same step on one device, without the all-reduce, is
its compute alone. Both are timed as a trainer times its steps, one step
after another, each waited for.

fixed cost = the step on every device - the step on one device: the
dispatch of a program over many devices in many processes, their
synchronisation, and the chain of latencies of one small all-reduce. A step
of any model pays it on top of its compute and its bytes / bandwidth.
"""

import jax
import jax.numpy as jnp
import numpy as np

from core import timing

AXIS = 'devices'
TINY_LAYERS = (64, 16, 16, 10)  # input features, hidden units, classes
TINY_BATCH = 8  # examples per device
_LEARNING_RATE = 0.01


def tiny_params() -> list:
  rng = np.random.default_rng(0)
  return [(rng.normal(0, 0.1, (a, b)).astype(np.float32), np.zeros(b, np.float32))
          for a, b in zip(TINY_LAYERS[:-1], TINY_LAYERS[1:])]


def gradient_bytes() -> int:
  return sum(w.nbytes + b.nbytes for w, b in tiny_params())


def _loss(params, x, y):
  for w, b in params[:-1]:
    x = jax.nn.relu(x @ w + b)
  w, b = params[-1]
  logits = x @ w + b
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def _step(params, x, y):
  grads = jax.grad(_loss)(params, x, y)
  grads = jax.lax.pmean(grads, AXIS)  # the data-parallel all-reduce
  return jax.tree.map(lambda p, g: p - _LEARNING_RATE * g, params, grads)


class TinyStep:
  """The tiny model's step compiled over `devices`, with its inputs there."""

  def __init__(self, devices):
    mesh = jax.make_mesh((len(devices),), (AXIS,), devices=devices,
                         axis_types=(jax.sharding.AxisType.Explicit,))
    replicated = jax.sharding.NamedSharding(mesh, jax.P())
    split = jax.sharding.NamedSharding(mesh, jax.P(AXIS))
    # check_vma=False: the gradients stay each device's own until the
    # explicit pmean, the one all-reduce of the step.
    self._program = jax.jit(jax.shard_map(
        _step, mesh=mesh, in_specs=(jax.P(), jax.P(AXIS), jax.P(AXIS)),
        out_specs=jax.P(), check_vma=False))
    rng = np.random.default_rng(1)
    n = TINY_BATCH * len(devices)
    put = lambda a, s: jax.make_array_from_callback(a.shape, s, lambda i: a[i])
    self._params = jax.tree.map(lambda a: put(a, replicated), tiny_params())
    self._x = put(rng.normal(size=(n, TINY_LAYERS[0])).astype(np.float32), split)
    self._y = put(rng.integers(0, TINY_LAYERS[-1], n).astype(np.int32), split)

  def _one_step(self):
    self._params = jax.block_until_ready(self._program(self._params, self._x, self._y))

  def median_s(self, repeats: int) -> float:
    return timing.median_s(self._one_step, repeats)
