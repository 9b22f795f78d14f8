"""What both parameter-server engines stand on: the worker devices, the
server shards in host memory, every interface (NIC) and the moves of bytes
between them.

`placement` decides, before anything compiles, which devices are workers,
how their variables travel (wire.py) and which shard owns which piece
(partition.py); it raises UsageError for what the engine cannot run.
`Cluster` then owns the shards, the workers' NICs and the thread pool the
transfers run in: push, pull, the per-shard counters, loading a TrainState
into the shards and assembling one from them. The synchronous engine
(sync_engine.py) and the asynchronous one (async_engine.py) differ only in
when they call these.
"""

import concurrent.futures
import dataclasses
import time

import jax
import numpy as np

from trainer.engines.emulation import link
from trainer.engines.emulation.network import NetworkSpec
from trainer.engines.emulation import topology as hosts_lib
from trainer.engines.emulation import threads
from trainer.engines.emulation import wire
from trainer.engines.emulation import workers
from trainer.engines.ps import partition
from trainer.engines.ps import shard as shard_lib
from trainer.engines.ps import state_split
from trainer.engines.emulation.wire import PARAMS, STATS
from trainer.state import TrainState

# The metrics (seconds) that split a step, in order (Engine.step_phases).
STEP_PHASES = ('compute_s', 'push_s', 'update_s', 'pull_s', 'wait_s')


def clip_scale(grad_norm: float, clip_norm: float) -> float:
  """optax.clip_by_global_norm's factor, from a norm the caller measured
  (clip_norm <= 0: no clipping)."""
  if clip_norm > 0 and grad_norm > clip_norm:
    return clip_norm / grad_norm
  return 1.0


@dataclasses.dataclass(frozen=True)
class Placement:
  """Who is where, decided from the config and the model alone."""
  devices: list  # the worker devices, one per worker
  mesh: jax.sharding.Mesh  # over the worker devices (workers.AXIS)
  layout: wire.Layout  # the workers' variables on the wire
  shard_pieces: list  # [shard][piece]: what each shard owns

  @property
  def num_workers(self) -> int:
    return len(self.devices)

  @property
  def batch_sharding(self) -> jax.sharding.NamedSharding:
    """Each worker's slice of the global batch on its device."""
    return jax.sharding.NamedSharding(self.mesh, jax.P(workers.AXIS))


def placement(exp, num_workers: int, num_shards: int, partitioner: str) -> Placement:
  """The worker devices and the shards' pieces; UsageError for a model or
  shard count the engine cannot run. Compiles nothing."""
  abstract = exp.abstract_state
  workers.check_batch_stats(exp.config, abstract.batch_stats)
  variables = wire.flat_variables(abstract.params, abstract.batch_stats)
  worker_devices = workers.worker_devices(num_workers)
  return Placement(
      devices=worker_devices, mesh=workers.worker_mesh(worker_devices),
      layout=wire.Layout(variables),
      shard_pieces=partition.partition(variables, num_shards, partitioner))


class Cluster:
  """The shards, the workers' NICs and the transfers between them.

  push, push_and_apply and pull run their transfers in the cluster's pool
  (threads named `thread_prefix` + 'link') and wait for them; a failure of
  one comes out of the call as it was raised. send runs in the caller's
  thread (ps.overlap's per-connection threads).
  """

  def __init__(self, exp, topology_: Placement, tx, network: NetworkSpec):
    """tx: the shards' optax transformation (without clipping: the engines
    clip with clip_scale); network: the links (its N_w is topology_'s)."""
    self._exp = exp
    self.devices = topology_.devices
    self.num_workers = n = topology_.num_workers
    self.layout = topology_.layout
    self.shard_pieces = topology_.shard_pieces
    self._params_treedef = jax.tree.structure(exp.abstract_state.params)
    self.thread_prefix = threads.new_prefix()
    self.shards = [
        shard_lib.ServerShard(j, pieces, tx, n, bandwidth_gbps=network.bandwidth_gbps,
                              latency_ms=network.latency_ms)
        for j, pieces in enumerate(self.shard_pieces)]
    # Servers on hosts of their own; workers grouped into hosts whose one
    # NIC they share (network.devices_per_host; 1: a NIC each).
    self.hosts = hosts_lib.Topology(
        n, network.devices_per_host, nic_gbps=network.bandwidth_gbps,
        nic_latency_ms=network.latency_ms)  # no fabric: PS traffic leaves the host
    self._worker_nics = [self.hosts.nic_of(i) for i in range(n)]
    self._transfers = concurrent.futures.ThreadPoolExecutor(
        n * len(self.shards), thread_name_prefix=f'{self.thread_prefix}link')
    # Which shards own a piece of each variable: a message of one variable
    # (ps.overlap) goes only there.
    self._owners = {path: [] for path in self.layout.paths}
    for j, pieces in enumerate(self.shard_pieces):
      for p in pieces:
        self._owners[p.path].append((j, p))

  @property
  def num_shards(self) -> int:
    return len(self.shards)

  def describe(self) -> str:
    """'2 workers, 2 shards (1.2, 1.1 MB each)', for the log."""
    megabytes = ', '.join(f'{b / 1e6:.1f}' for b in partition.shard_bytes(self.shard_pieces))
    return f'{self.num_workers} workers, {self.num_shards} shards ({megabytes} MB each)'

  # --- State in and out ---------------------------------------------------------
  def load(self, host: TrainState, opt_state=None) -> None:
    """Gives every shard its pieces of a host copy of the whole state.
    opt_state: the optimiser state to load instead of host.opt_state."""
    opt_state = host.opt_state if opt_state is None else opt_state
    for s in self.shards:
      s.load(host.params, host.batch_stats, opt_state, self._params_treedef)

  def shard_counts(self) -> dict:
    """optax's step counts on the shards, which apply the same updates."""
    return state_split.counts(self.shards[0].opt_state)

  def state(self, step: int, counts: dict | None = None) -> TrainState:
    """The shards' state, laid out as the SPMD engine keeps it.
    counts: optax's step counts to put in it instead of the shards' own."""
    abstract = self._exp.abstract_state
    variables = [s.variables() for s in self.shards]
    opt_state = state_split.assemble_opt_state(
        abstract.opt_state, abstract.params, [s.opt_state for s in self.shards],
        self.shard_pieces)
    if counts is not None:
      opt_state = state_split.with_counts(opt_state, counts)
    state = TrainState(
        step=np.int32(step),
        params=state_split.assemble(abstract.params, PARAMS, variables,
                                    self.shard_pieces),
        batch_stats=state_split.assemble(abstract.batch_stats, STATS, variables,
                                         self.shard_pieces),
        opt_state=opt_state)
    return jax.device_put(state, self._exp.state_shardings)

  # --- Moving bytes -------------------------------------------------------------
  def _copies_to(self, shard, worker: int, flat: dict) -> list:
    """(shard's buffer for this worker, source) of the pieces in `flat`."""
    inbox = shard.inbox[worker]
    return [(inbox[p.key], p.of(flat[p.path])) for p in shard.pieces if p.path in flat]

  def _to_every_shard(self, worker: int, flat: dict, on_arrival=None) -> list:
    """Sends each shard its pieces of `flat` at once; waits for all. Returns
    [on_arrival(shard)] of the shards that got some, each called in its
    transfer's thread as soon as that transfer has arrived."""
    def send(shard, copies):
      link.transfer(self._worker_nics[worker], shard.nic, copies)
      return on_arrival(shard) if on_arrival is not None else None
    futures = []
    for s in self.shards:
      copies = self._copies_to(s, worker, flat)
      if copies:
        futures.append(self._transfers.submit(send, s, copies))
    return [f.result() for f in futures]

  def push(self, worker: int, flat: dict) -> None:
    """Worker `worker`'s gradients and statistics ({path: host array}) to
    every shard's buffer for this worker; only the paths in `flat`."""
    self._to_every_shard(worker, flat)

  def push_and_apply(self, worker: int, flat: dict, scale: float) -> float:
    """Pushes like `push`; each shard applies the gradient (times `scale`) as
    soon as it has arrived. Returns the longest of the shards' update times."""
    def apply(shard):
      start = time.perf_counter()
      shard.apply_one(worker, scale)
      return time.perf_counter() - start
    return max(self._to_every_shard(worker, flat, apply), default=0.0)

  def owners(self, path: str) -> list[int]:
    """The shards that own a piece of variable `path`, in order."""
    return sorted({j for j, _ in self._owners[path]})

  def send(self, worker: int, shard: int, flat: dict) -> float:
    """One message from a worker to one shard, with that shard's pieces of
    `flat`, in the caller's thread; returns when its last byte has left,
    with the time at which it arrives (link.transfer, for link.wait_until)."""
    s = self.shards[shard]
    copies = [(s.inbox[worker][p.key], p.of(flat[path]))
              for path in flat for j, p in self._owners[path] if j == shard]
    return link.transfer(self._worker_nics[worker], s.nic, copies,
                         wait_for_arrival=False)

  def pull(self, worker: int, staging: dict) -> None:
    """Every shard's pieces into this worker's `staging` ({path: array})."""
    futures = []
    for s in self.shards:
      values = s.variables()
      copies = [(p.of(staging[p.path]), values[p.key]) for p in s.pieces]
      futures.append(self._transfers.submit(
          link.transfer, s.nic, self._worker_nics[worker], copies))
    for f in futures:
      f.result()

  def pull_to_device(self, worker: int, staging: np.ndarray) -> jax.Array:
    """Pulls every shard's pieces into `staging` (a wire vector) and puts it
    on the worker's device."""
    self.pull(worker, self.layout.views(staging))
    return jax.block_until_ready(
        jax.device_put(staging, self.devices[worker], may_alias=False))

  def shard_counters(self, step_s: float) -> dict:
    """Bytes pushed to and pulled from each shard since the last call, and
    its busy fraction of `step_s`."""
    out = {}
    for j, s in enumerate(self.shards):
      c = s.nic.pop_counters()
      busy = c['rx_busy_s'] + c['tx_busy_s'] + s.pop_update_s()
      out[f'push_bytes_shard{j}'] = c['rx_bytes']
      out[f'pull_bytes_shard{j}'] = c['tx_bytes']
      out[f'busy_shard{j}'] = busy / step_s if step_s > 0 else 0.0
    # What each host's NIC sent: its workers' pushes (their pulls arrive).
    out['nic_bytes_per_host'] = float(np.mean(
        [nic.pop_counters()['tx_bytes'] for nic in self.hosts.nics]))
    return out

  # --- The end ------------------------------------------------------------------
  def close(self, error: BaseException | None = None) -> None:
    """Stops the transfers and joins every thread named `thread_prefix`
    (the engine's own included: stop them first); RunFailure if one does
    not end. error: the failure that ended the run, for the message."""
    # Nothing queued is run; what is running ends with its current transfer.
    self._transfers.shutdown(wait=False, cancel_futures=True)
    threads.join(self.thread_prefix, threads.CLOSE_TIMEOUT_S,
                 f' (after {error})' if error is not None else '')
