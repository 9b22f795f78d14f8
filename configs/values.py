"""Accepted values and parsers of config keys that several layers read.

The trainer, the planner, the probe and the checks all parse these keys the
same way; they live here, below all of them, so that none imports another
for a tuple or a parser. Each raises UsageError with one line that names the
key and what is accepted. An engine's own values stay in its package
(trainer.engines.allreduce.ALGORITHMS).
"""

import math

from core.errors import UsageError

MESH_AXES = ('data', 'fsdp', 'tensor')
OPTIMIZERS = ('sgd', 'adamw', 'lars', 'lamb')
LR_SCALINGS = ('linear', 'none')
LR_SCHEDULES = ('cosine', 'constant', 'step', 'poly')
EVAL_WEIGHTS = ('raw', 'ema')  # eval.weights
PS_PLACEMENTS = ('dedicated', 'colocated')  # plan.ps_placement
PLAN_TARGETS = ('cluster', 'here')  # plan.target
PLAN_PARALLELISMS = ('data', 'mesh')  # plan.parallelism
BENCH_DATA = ('synthetic', 'real')  # bench.data
NONFINITE = ('stop', 'skip')
CLUSTERS = ('auto', 'slurm', 'ompi', 'none')
# Seeds are 32-bit: JAX's keys take the seed modulo 2**32 without x64, so two
# seeds further apart would start from the same parameters.
SEED_RANGE = (0, 2**32 - 1)
_MAX_STEP_DIGITS = 18  # below 2**63: a step is an int64


def one_of(key: str, value, accepted) -> None:
  """UsageError unless `value` is one of `accepted`."""
  if value not in accepted:
    raise UsageError(f'{key}={value!r} is not accepted; use one of: '
                     f'{", ".join(map(str, accepted))}')


def at_least(key: str, value, minimum) -> None:
  """UsageError unless `value` >= `minimum`."""
  if value < minimum:
    raise UsageError(f'{key}={value!r} must be >= {minimum}')


def profile_steps(text: str) -> tuple[int, int] | None:
  """profile_steps 'A,B' -> (A, B) with 1 <= A < B; '' -> None."""
  if not text:
    return None
  parts = text.split(',')
  try:
    first, end = (int(p) for p in parts)
  except ValueError:
    first = end = None
  if first is None or not 1 <= first < end:
    raise UsageError(f'profile_steps={text!r}: expected FIRST,END with '
                     '1 <= FIRST < END (steps FIRST..END-1 are traced)')
  return first, end


def eval_checkpoint(text: str) -> str | int:
  """eval.checkpoint: 'latest', 'best' or a step number (int)."""
  if text in ('latest', 'best'):
    return text
  # ASCII digits only: int() would also take other scripts' digits, and
  # 4300 digits or more not at all.
  if text.isascii() and text.isdigit() and len(text) <= _MAX_STEP_DIGITS:
    return int(text)
  raise UsageError(f'eval.checkpoint={text!r} is not accepted; use latest, best '
                   'or a step number')


def parse_step_epochs(text: str) -> list[float]:
  """lr_step_epochs as numbers (ValueError when one is not)."""
  return [float(e) for e in text.split(',') if e.strip()]


def parse_list(key: str, text: str, kind=int) -> list:
  """'1,2,4' -> [1, 2, 4]; UsageError naming `key` for an empty or bad list."""
  try:
    values = [kind(x) for x in text.split(',') if x.strip()]
  except ValueError:
    values = None
  if not values:
    raise UsageError(f'{key}={text!r} must be a comma-separated list of values')
  return values


def parse_names(key: str, text: str, accepted, what: str) -> list[str]:
  """'a, b' -> ['a', 'b'], each one of `accepted`; UsageError naming `key`
  for an empty list (naming no `what`) or a name not accepted."""
  names = [n.strip() for n in text.split(',') if n.strip()]
  if not names:
    raise UsageError(f'{key}={text!r} names no {what}; use some of: '
                     f'{", ".join(accepted)}')
  for name in names:
    one_of(key, name, accepted)
  return names


def resolve_mesh_shape(mesh_config, num_devices: int) -> tuple[int, ...]:
  """(data, fsdp, tensor) sizes with -1 filled; UsageError if they don't fit."""
  sizes = [mesh_config[axis] for axis in MESH_AXES]
  fixed = math.prod(s for s in sizes if s != -1)
  described = ', '.join(f'{a}={s}' for a, s in zip(MESH_AXES, sizes))
  if -1 in sizes:
    if num_devices % fixed:
      raise UsageError(f'mesh ({described}): {num_devices} devices do not '
                       f'divide by {fixed}; choose sizes whose product divides '
                       f'{num_devices}')
    sizes[sizes.index(-1)] = num_devices // fixed
  elif fixed != num_devices:
    raise UsageError(f'mesh ({described}) needs {fixed} devices but '
                     f'{num_devices} are present; make the product '
                     f'{num_devices} or set one axis to -1')
  return tuple(sizes)


def plan_batches(config) -> list[int]:
  """plan.per_worker_batch_sizes, increasing, less those a device cannot
  take as configured: each must split into grad_accum_steps micro-batches
  of whole batch-norm groups (model.bn_group_size). UsageError when none is
  left, naming the keys. The planner plans them and the probe times them."""
  batches = sorted(set(parse_list('plan.per_worker_batch_sizes',
                                  config.plan.per_worker_batch_sizes)))
  unit = config.grad_accum_steps * (config.model.bn_group_size or 1)
  kept = [b for b in batches if b % unit == 0]
  if not kept:
    raise UsageError(
        f'plan.per_worker_batch_sizes={config.plan.per_worker_batch_sizes!r}: none is a '
        f'multiple of grad_accum_steps={config.grad_accum_steps} x model.bn_group_size='
        f'{config.model.bn_group_size or 1}; give batches of whole batch-norm groups')
  return kept
