"""The parameter-server engine: the class for the configured ps.mode.

  sync   sync_engine.SyncParameterServerEngine: push, one aggregated update
         per step, pull (SPMD data parallelism's update);
  async  async_engine.AsyncParameterServerEngine: each worker's gradient
         applied on arrival, with bounded staleness.
Both stand on the same cluster (cluster.py): shards, links, push and pull.
"""

from trainer.engines.ps import async_engine
from trainer.engines.ps import sync_engine

ENGINES = {
    'sync': sync_engine.SyncParameterServerEngine,
    'async': async_engine.AsyncParameterServerEngine,
}


def create(exp):
  """The parameter-server engine of exp.config.ps.mode (validated already)."""
  return ENGINES[exp.config.ps.mode](exp)
