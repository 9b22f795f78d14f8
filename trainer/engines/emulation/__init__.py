"""What the emulated engines (parameter server, all-reduce) share.

  link.py     network interfaces and real transfers paced in real time
  wire.py     a worker's variables as one vector on the wire
  workers.py  the workers' gradient programs (the shared loss code) and
              their memory check
  threads.py  the engines' threads: failures reach the loop, close joins
  topology.py  workers grouped into hosts, and the interfaces a transfer uses
  network.py  NetworkSpec: the links and hosts as a small typed spec
  checks.py   the config checks both emulated engines share
  timers.py   the workers' own work timed for the planner (T_C, host copies)
It imports neither emulated engine (tests/test_layers.py checks it). Its
exports below load their modules on use.
"""

from trainer.engines.emulation.network import NetworkSpec  # pylint: disable=unused-import


def ComputeTimer(exp, num_workers: int, per_worker_batch: int, vector=None):  # pylint: disable=invalid-name
  """The workers' gradient program, compiled and timed on demand (timers.py)."""
  from trainer.engines.emulation import timers  # pylint: disable=g-import-not-at-top
  return timers.ComputeTimer(exp, num_workers, per_worker_batch, vector)


def host_copies_s(exp, repeats: int = 5) -> dict:
  """One worker's host-side copies of a step (timers.py)."""
  from trainer.engines.emulation import timers  # pylint: disable=g-import-not-at-top
  return timers.host_copies_s(exp, repeats)


def link_chunk_bytes(bandwidth_gbps: float) -> int:
  """What a paced link copies before it books the bytes (timers.py)."""
  from trainer.engines.emulation import timers  # pylint: disable=g-import-not-at-top
  return timers.link_chunk_bytes(bandwidth_gbps)


def layout(exp):
  """The wire layout of the model's variables (wire.Layout)."""
  from trainer.engines.emulation import timers  # pylint: disable=g-import-not-at-top
  return timers.layout(exp)


def worker_mesh(devices):
  """A one-axis mesh over worker devices (workers.AXIS)."""
  from trainer.engines.emulation import workers  # pylint: disable=g-import-not-at-top
  return workers.worker_mesh(devices)


def worker_axis() -> str:
  from trainer.engines.emulation import workers  # pylint: disable=g-import-not-at-top
  return workers.AXIS


def compile_tree_program(exp, mesh, batch_size: int):
  """The workers' gradients over `mesh` with the parameters as their tree
  (workers.py)."""
  from trainer.engines.emulation import workers  # pylint: disable=g-import-not-at-top
  return workers.compile_tree_program(exp, mesh, batch_size)


def compile_sync_program(exp, mesh, layout_, batch_size: int):
  """The workers' gradient program over `mesh` at a global batch (workers.py)."""
  from trainer.engines.emulation import workers  # pylint: disable=g-import-not-at-top
  return workers.compile_sync_program(exp, mesh, layout_, batch_size=batch_size)
