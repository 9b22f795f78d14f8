"""Starts the JAX runtime: emulated CPU devices and multi-process set-up."""

import os

from cli.errors import UsageError


def initialize(*, num_cpu_devices: int, coordinator_address: str | None,
               num_processes: int, process_id: int) -> None:
  """Must run before anything touches a JAX backend."""
  # On a CPU-only machine one XLA device uses the cores poorly for small
  # convolutions; one emulated device per core keeps every core busy. An
  # explicit XLA_FLAGS device count (as the tests set) wins.
  import jax  # pylint: disable=g-import-not-at-top
  if '--xla_force_host_platform_device_count' not in os.environ.get('XLA_FLAGS', ''):
    jax.config.update('jax_num_cpu_devices', num_cpu_devices or os.cpu_count() or 1)
  if num_processes > 1:
    try:
      jax.distributed.initialize(coordinator_address=coordinator_address,
                                 num_processes=num_processes,
                                 process_id=process_id)
    except (RuntimeError, ValueError) as e:
      raise UsageError(f'--coordinator_address={coordinator_address}: '
                       f'could not join the run: {e}') from None
