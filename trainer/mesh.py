"""The device mesh and how logical axes map onto it."""

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec
import ml_collections

from configs import schema
from configs.values import MESH_AXES, one_of, resolve_mesh_shape
from core.errors import UsageError

# Mesh axes are Auto, not the new default Explicit: the models annotate only
# parameters (and a few activations) with logical names, and we let XLA's
# sharding propagation place the rest. Explicit axes would make every
# intermediate's sharding part of its type, which flax.linen layers (conv,
# batch norm, pooling) do not declare, so tracing would fail on ambiguous
# shardings instead of letting the compiler choose.
AXIS_TYPES = (AxisType.Auto,) * len(MESH_AXES)


def check_config(config: ml_collections.ConfigDict) -> None:
  """The mesh's sizes and the sharding rules; UsageError with one line."""
  sizes = [config.mesh[axis] for axis in MESH_AXES]
  for axis, size in zip(MESH_AXES, sizes):
    if size == 0 or size < -1:
      raise UsageError(f'mesh.{axis}={size} must be a positive size or -1 '
                       '(fill the remaining devices)')
  if sizes.count(-1) > 1:
    raise UsageError('mesh: at most one axis may be -1, got '
                     + ', '.join(f'{a}={s}' for a, s in zip(MESH_AXES, sizes)))
  for rule in config.sharding_rules:
    if not (isinstance(rule, tuple) and len(rule) == 2 and
            all(isinstance(part, str) for part in rule)):
      raise UsageError(f'sharding_rules: {schema.shown(rule)} must be a pair '
                       "('logical_axis', 'mesh_axis[,mesh_axis]' or '')")
    for axis in filter(None, rule[1].split(',')):
      one_of(f'sharding_rules[{rule[0]}]', axis, MESH_AXES)


def check_against_devices(config: ml_collections.ConfigDict, *,
                          num_devices: int, num_processes: int) -> None:
  """The mesh on `num_devices`, and the batches over its batch-sharded
  devices, the processes, the gradient-accumulation steps and the
  batch-norm groups."""
  data, fsdp, _ = resolve_mesh_shape(config.mesh, num_devices)
  batch_ways = data * fsdp
  for key in ('batch_size', 'eval.batch_size'):
    value = config.batch_size if key == 'batch_size' else (
        config.eval.batch_size or config.batch_size)
    if value % batch_ways:
      raise UsageError(
          f'{key}={value} does not divide over the {batch_ways} batch-sharded '
          f'devices (mesh data={data} x fsdp={fsdp}); use a multiple of '
          f'{batch_ways}')
    if value % num_processes:
      raise UsageError(f'{key}={value} does not divide over {num_processes} '
                       'processes')
  per_device = config.batch_size // batch_ways
  if per_device % config.grad_accum_steps:
    raise UsageError(
        f'grad_accum_steps={config.grad_accum_steps} does not divide the '
        f'per-device batch of {per_device} (batch_size {config.batch_size} over '
        f'{batch_ways} devices)')
  group = config.model.bn_group_size
  micro_batch = config.batch_size // config.grad_accum_steps
  if group and micro_batch % group:
    raise UsageError(f'model.bn_group_size={group} does not divide the batch '
                     f'of {micro_batch} that batch norm sees (batch_size / '
                     'grad_accum_steps)')


def create_mesh(mesh_config: ml_collections.ConfigDict,
                devices=None) -> jax.sharding.Mesh:
  """The (data, fsdp, tensor) mesh over `devices` (default: all devices)."""
  devices = jax.devices() if devices is None else devices
  shape = resolve_mesh_shape(mesh_config, len(devices))
  return jax.make_mesh(shape, MESH_AXES, axis_types=AXIS_TYPES, devices=devices)


def logical_axis_rules(config: ml_collections.ConfigDict):
  """config.sharding_rules as flax rules: (logical, mesh axes or None)."""
  rules = []
  for logical, mesh_axes in config.sharding_rules:
    axes = tuple(filter(None, mesh_axes.split(',')))
    rules.append((logical, axes if len(axes) > 1 else (axes[0] if axes else None)))
  return tuple(rules)


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  """Batches split their leading axis over the data and fsdp axes."""
  return NamedSharding(mesh, PartitionSpec(('data', 'fsdp')))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())
