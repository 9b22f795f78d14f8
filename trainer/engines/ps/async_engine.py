"""The asynchronous parameter-server engine: each gradient applied on arrival.

Worker threads (async_workers.py) pull, compute and push on their own, at
most ps.max_staleness steps apart; each shard applies a gradient as soon as
it has arrived, with 1/N_w of a step's learning rate. This class hands the
workers their slices, collects their records, and keeps optax's step counts
exact across checkpoints (state_split.py, asynchronous step counts).
"""

import time

from absl import logging
import jax

from trainer import optim
from trainer.engines.emulation import workers
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.ps import async_workers
from trainer.engines.ps import cluster as cluster_lib
from trainer.engines.ps import state_split
from trainer.state import TrainState


class AsyncParameterServerEngine:
  """Stale-synchronous parallel workers over the shared shards."""

  def __init__(self, exp):
    config = exp.config
    network = NetworkSpec.from_config(config.network, jax.device_count())
    topology = cluster_lib.placement(exp, network.num_workers, config.ps.num_shards,
                                     config.ps.partitioner)
    self.batch_sharding = topology.batch_sharding
    self.step_phases = cluster_lib.STEP_PHASES
    n = topology.num_workers

    # The workers' programs first: a run whose workers do not fit their
    # devices stops here, before the shards compile and before anything is
    # written.
    start = time.perf_counter()
    programs = workers.compile_async_programs(
        exp, topology.devices, topology.layout, config.batch_size // n)
    workers.check_memory(exp, programs[0], topology.layout)  # all alike
    compile_s = time.perf_counter() - start

    # Each of the N_w gradients of a round is one optax update and advances
    # its step count: the schedule reads the count in rounds (global steps),
    # and each update moves 1/N_w of a step's rate, so momentum, weight decay
    # and Adam alike add up to one step per round. The shards clip each
    # gradient by its own norm, so their chain holds an identity where
    # clipping was.
    lr_fn = lambda count: exp.learning_rate_fn(count // n) / n  # pylint: disable=unnecessary-lambda-assignment
    self.cluster = cluster_lib.Cluster(
        exp, topology, optim.create_optimizer(config, lr_fn, clip=False), network)
    self._runner = async_workers.AsyncRunner(self.cluster, exp, programs)
    logging.info('Compiled the PS workers\' gradient programs in %.1fs; %s',
                 compile_s, self.cluster.describe())
    self._step = 0
    self._records = []

  # --- Engine interface -------------------------------------------------------
  def start(self, state: TrainState, meta: dict | None = None) -> None:
    host = jax.device_get(state)
    self._step = int(host.step)
    counts = state_split.async_counts(host.opt_state, meta, self.cluster.num_workers)
    self.cluster.load(host, state_split.with_counts(host.opt_state, counts))
    self._runner.start(self._step)  # workers pull at every step

  def step(self, batch) -> None:
    self._runner.submit(self._step, batch)
    self._step += 1

  def collect_metrics(self) -> list[dict]:
    self._records.extend(self._runner.drain())
    records, self._records = self._records, []
    return records

  def state(self) -> TrainState:
    self._records.extend(self._runner.drain())
    # The SPMD side reads a count in global steps: the rounds the shards'
    # schedule reads (rounded down); checkpoint_meta keeps the exact one.
    n = self.cluster.num_workers
    return self.cluster.state(
        self._step, {path: c // n for path, c in self.cluster.shard_counts().items()})

  def checkpoint_meta(self) -> dict:
    """What a checkpoint of state() must keep besides it to resume exactly.

    Asynchronous shards count one optax update per applied gradient: N_w per
    step, fewer when nonfinite=skip drops some. state() gives the SPMD side
    that count in rounds, rounded down; the exact counts (and N_w, in case
    it changes on resume) go into the checkpoint's metadata.
    """
    self._records.extend(self._runner.drain())
    return state_split.async_counts_meta(self.cluster.shard_counts(),
                                         self.cluster.num_workers)

  def close(self) -> None:
    """Stops every thread of the engine; RunFailure if one does not end."""
    self._runner.stop()
    self.cluster.close(self._runner.error)
