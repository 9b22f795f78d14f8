"""The device mesh and how logical axes map onto it."""

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec
import ml_collections

from trainer.validation import MESH_AXES, resolve_mesh_shape

# Mesh axes are Auto, not the new default Explicit: the models annotate only
# parameters (and a few activations) with logical names, and we let XLA's
# sharding propagation place the rest. Explicit axes would make every
# intermediate's sharding part of its type, which flax.linen layers (conv,
# batch norm, pooling) do not declare, so tracing would fail on ambiguous
# shardings instead of letting the compiler choose.
AXIS_TYPES = (AxisType.Auto,) * len(MESH_AXES)


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
