"""What the probe's processes exchange: barriers and per-process results.

Each measurement starts on every process at once, after a barrier, so that
processes that share a machine or a network contend as they do in
training. With one process these are free.
"""

import jax
import numpy as np

from coordination import agreement


def barrier() -> None:
  """Returns once every process has called it (a collective)."""
  if jax.process_count() > 1:
    agreement.gather_from_processes(np.zeros(1, np.int32))


def gather(value) -> list:
  """Every process's `value` (JSON-able), by process index (a collective)."""
  if jax.process_count() == 1:
    return [value]
  return agreement.gather_json(value)


def all_agree(flag: bool) -> bool:
  """Whether `flag` holds on every process (a collective)."""
  return all(gather(bool(flag)))
