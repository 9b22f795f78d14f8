"""The SPMD engine: one jit-compiled train step over the whole device mesh;
XLA inserts the collectives (engine.py).

Its part of the engine contract (trainer/engines/__init__.py): it reads no
config section of its own, runs over the real devices and network, and its
mesh and batch checks are the trainer's own (trainer/mesh.py). Its
modules load on use: importing the package touches no device (validation
imports it before the runtime starts).
"""

CONFIG_SECTIONS = ()
EMULATED = False


def check_section(config) -> None:
  del config  # no section of its own


def check_config(config) -> None:
  del config  # the mesh and sharding checks apply to every engine


def check_against_devices(config, num_devices: int, num_processes: int) -> None:
  del config, num_devices, num_processes  # the trainer's own checks suffice


def create(exp):
  from trainer.engines.spmd import engine  # pylint: disable=g-import-not-at-top
  return engine.SpmdEngine(exp)


def jit_train_step(exp):
  """The train step jitted with its shardings, not yet lowered (engine.py)."""
  from trainer.engines.spmd import engine  # pylint: disable=g-import-not-at-top
  return engine.jit_train_step(exp)


def compile_train_step(exp):
  """The train step compiled, and its FLOPs (engine.py)."""
  from trainer.engines.spmd import engine  # pylint: disable=g-import-not-at-top
  return engine.compile_train_step(exp)
