"""What one data-parallel step pays beyond its compute and its bytes.

A tiny model (an MLP of TINY_INPUT inputs, TINY_HIDDEN-unit layers and
TINY_CLASSES outputs, a few kB of parameters) takes a data-parallel SGD
step: each device computes the gradients of its TINY_BATCH examples, the
gradients are averaged over every device of every process, and each device
updates its copy. XLA combines the average into one all-reduce of every
parameter array (two a layer); the same step on one device, without the
all-reduce, is its compute alone. Both are timed as a trainer times its
steps, one step after another, each waited for.

A step's extra time on every device, extra = (step on every device) - (step
on one device), is timed at several array counts k (OPERAND_COUNTS, the
same tiny arrays, more layers) and fitted as

  extra(k) = fixed_cost_s + k * per_operand_s

- fixed_cost_s: what a step pays whatever it moves (the dispatch of a
  program over many devices in many processes, their synchronisation);
- per_operand_s: what each array of a step's all-reduce adds. A library
  that moves the arrays of one collective one by one (gloo does, each at a
  latency) pays it per array; one that groups them (NCCL) pays little.
Both are measured as a step pays them, inside a program that also
computes, where a chain of bare collectives (probe/collectives.py) may run
at another pace.

What an array costs can depend on its size: over two processes on one
machine, gloo has been seen to move arrays of under a kilobyte for a fifth
of a millisecond each and arrays of a hundred kilobytes and more for about
3 to 5 ms each, on a day when another machine charged every size 4 ms. So
steps of EQUAL_ARRAYS gradient arrays of one size (EqualArraysStep) are
timed at each of ARRAY_BYTES too, each less the fitted fixed_cost_s, and
the planner charges each array of the model's own step what an array of
its size costs (planner/from_probe.py).
"""

import jax
import jax.numpy as jnp
import numpy as np

from core import timing

AXIS = 'devices'
TINY_INPUT, TINY_HIDDEN, TINY_CLASSES = 64, 16, 10
TINY_BATCH = 8  # examples per device
# The arrays of the tiny step's all-reduce (two a layer): 1, 4 and 16 layers.
OPERAND_COUNTS = (2, 8, 32)
# The sizes of EqualArraysStep's arrays, bytes: between the tiny MLP's
# (about 600 bytes) and a large model's largest. Over two processes on
# one machine, gloo's cost an array has been seen to jump about twentyfold
# between 64 kB and 150 kB: 32 kB and 128 kB bracket that.
ARRAY_BYTES = (4 << 10, 32 << 10, 128 << 10, 1 << 20)
# The arrays of each such step: the tiny model's fit gives the step's fixed
# cost, so one count a size gives its cost an array.
EQUAL_ARRAYS = 32
_LEARNING_RATE = 0.01


def tiny_widths(operands: int, hidden: int = TINY_HIDDEN) -> tuple[int, ...]:
  """The layer widths of the tiny MLP whose gradients are `operands` arrays
  (benchmarks/array_cost.py widens its hidden layers)."""
  layers = operands // 2
  return (TINY_INPUT,) + (hidden,) * (layers - 1) + (TINY_CLASSES,)


def tiny_params(operands: int, hidden: int = TINY_HIDDEN) -> list:
  rng = np.random.default_rng(0)
  widths = tiny_widths(operands, hidden)
  return [(rng.normal(0, 0.1, (a, b)).astype(np.float32), np.zeros(b, np.float32))
          for a, b in zip(widths[:-1], widths[1:])]


def gradient_bytes(operands: int, hidden: int = TINY_HIDDEN) -> int:
  return sum(w.nbytes + b.nbytes for w, b in tiny_params(operands, hidden))


def _loss(params, x, y):
  for w, b in params[:-1]:
    x = jax.nn.relu(x @ w + b)
  w, b = params[-1]
  logits = x @ w + b
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def _equal_loss(params, x, y):
  """A loss whose gradient is one array the size of each parameter array,
  computed from each device's own examples."""
  del y
  scale = jnp.mean(x)
  return sum(jnp.mean((w * scale) ** 2) for w in params)


def _sgd_step(loss):
  """A data-parallel SGD step of `loss`: each device's gradients, averaged
  over the devices by one all-reduce, applied to its copy."""
  def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    grads = jax.lax.pmean(grads, AXIS)  # the data-parallel all-reduce
    return jax.tree.map(lambda p, g: p - _LEARNING_RATE * g, params, grads)
  return step


def equal_params(operands: int, array_bytes: int) -> list:
  return [np.full(array_bytes // 4, 0.1, np.float32) for _ in range(operands)]


class _Step:
  """A data-parallel step of `loss_step` over `devices`, with its
  parameters replicated and its examples split there."""

  def __init__(self, devices, loss_step, params):
    mesh = jax.make_mesh((len(devices),), (AXIS,), devices=devices,
                         axis_types=(jax.sharding.AxisType.Explicit,))
    replicated = jax.sharding.NamedSharding(mesh, jax.P())
    split = jax.sharding.NamedSharding(mesh, jax.P(AXIS))
    # check_vma=False: the gradients stay each device's own until the
    # explicit pmean, the one all-reduce of the step.
    self._program = jax.jit(jax.shard_map(
        loss_step, mesh=mesh, in_specs=(jax.P(), jax.P(AXIS), jax.P(AXIS)),
        out_specs=jax.P(), check_vma=False))
    rng = np.random.default_rng(1)
    n = TINY_BATCH * len(devices)
    put = lambda a, s: jax.make_array_from_callback(a.shape, s, lambda i: a[i])
    self._params = jax.tree.map(lambda a: put(a, replicated), params)
    self._x = put(rng.normal(size=(n, TINY_INPUT)).astype(np.float32), split)
    self._y = put(rng.integers(0, TINY_CLASSES, n).astype(np.int32), split)

  def compiled_text(self) -> str:
    """The compiled step's HLO (tests read its all-reduce's arrays)."""
    return self._program.lower(self._params, self._x, self._y).compile().as_text()

  def _one_step(self):
    self._params = jax.block_until_ready(self._program(self._params, self._x, self._y))

  def median_s(self, repeats: int) -> float:
    return timing.median_s(self._one_step, repeats)


class TinyStep(_Step):
  """The tiny model of `operands` gradient arrays, its step compiled over
  `devices`, with its inputs there."""

  def __init__(self, devices, operands: int, hidden: int = TINY_HIDDEN):
    super().__init__(devices, _sgd_step(_loss), tiny_params(operands, hidden))


class EqualArraysStep(_Step):
  """A step whose all-reduce moves `operands` gradient arrays of
  `array_bytes` bytes each, and computes little else."""

  def __init__(self, devices, operands: int, array_bytes: int):
    super().__init__(devices, _sgd_step(_equal_loss),
                     equal_params(operands, array_bytes))
