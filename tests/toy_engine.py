"""A fourth engine, added as a new engine would be: one module exporting the
engine contract (trainer/engines/__init__.py) and one REGISTRY line, which
tests/test_engine_registry.py adds. It is the SPMD engine, counting its
steps, with a config check of its own."""

from core.errors import UsageError
from trainer.engines import spmd

CONFIG_SECTIONS = ()
EMULATED = False
STEPS_TAKEN = []  # one entry per step any ToyEngine took


def check_section(config) -> None:
  del config


def check_config(config) -> None:
  if config.grad_accum_steps != 1:
    raise UsageError('engine=toy takes grad_accum_steps=1 only')


def check_against_devices(config, num_devices: int, num_processes: int) -> None:
  del config, num_devices, num_processes


class ToyEngine:
  """The SPMD engine through its package's exports, counting the steps."""

  def __init__(self, exp):
    self._inner = spmd.create(exp)
    self.batch_sharding = self._inner.batch_sharding
    self.step_phases = self._inner.step_phases

  def start(self, state, meta=None) -> None:
    self._inner.start(state, meta)

  def step(self, batch) -> None:
    STEPS_TAKEN.append(1)
    self._inner.step(batch)

  def collect_metrics(self) -> list[dict]:
    return self._inner.collect_metrics()

  def state(self):
    return self._inner.state()

  def checkpoint_meta(self) -> dict:
    return self._inner.checkpoint_meta()

  def close(self) -> None:
    self._inner.close()


def create(exp):
  return ToyEngine(exp)
