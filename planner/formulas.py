"""The cost model of a data-parallel step, after Zou et al. (2017).

Pure functions of: the model's bytes S, the compute time T_C of one worker's
mini-batch, the link bandwidth B (bytes/s per interface and direction; inf =
unlimited), the one-way latency, and the numbers of workers N_w and server
shards N_ps. The planner fills them with its own measurements; the study
checks what they predict against the parameter-server engine's clock.
"""

import math


def compute_from_peak_s(flops: float, peak_flops_per_s: float,
                        utilization: float) -> float:
  """T_C of a device that runs a step's `flops` at `utilization` of its peak."""
  return flops / (peak_flops_per_s * utilization)


def ring_allreduce_s(model_bytes: float, bandwidth: float, num_workers: int,
                     latency_s: float = 0.0) -> float:
  """Ring all-reduce: 2(n-1)/n * S/B, plus a latency per each of 2(n-1) hops."""
  n = num_workers
  if n <= 1:
    return 0.0
  return 2 * (n - 1) / n * model_bytes / bandwidth + 2 * (n - 1) * latency_s


def ps_direction_s(model_bytes: float, bandwidth: float, num_workers: int,
                   num_shards: int, latency_s: float = 0.0,
                   largest_shard_bytes: float | None = None) -> float:
  """One direction (push or pull) of a PS step.

  A worker's own link carries all S bytes; the busiest shard's link carries
  its share from every worker, N_w * S/N_ps for balanced shards. The slower
  of the two sets the time: max(S/B, N_w*S/(N_ps*B)), plus one latency.
  """
  shard = model_bytes / num_shards if largest_shard_bytes is None else largest_shard_bytes
  return max(model_bytes, num_workers * shard) / bandwidth + latency_s


def first_chunk_share(message_bytes: float, chunk_bytes: float) -> float:
  """The part of a message's bytes in its first chunk: min(1, chunk/message)."""
  return min(1.0, chunk_bytes / message_bytes) if message_bytes > 0 else 1.0


def emulated_direction_s(link_s: float, host_s: float, share: float = 0.0) -> float:
  """A direction whose bytes the host copies while the link carries them.

  The emulated link (trainer/engines/emulation/link.py) books a chunk only
  once the host has copied it: each message's first chunk is copied before
  the link starts on it, and the rest while the link carries the chunks
  before. `share` of the host's time `host_s` (the first chunks' part of the
  bytes, first_chunk_share) therefore adds to the link's time, and the
  direction takes max(host_s, link_s + share * host_s). share = 0: copies
  hide entirely behind the link (a real NIC's DMA).
  """
  return max(host_s, link_s + share * host_s)


def ps_step_s(compute_s: float, model_bytes: float, bandwidth: float,
              num_workers: int, num_shards: int, *, latency_s: float = 0.0,
              update_s: float = 0.0, overlap: bool = False,
              largest_shard_bytes: float | None = None,
              host_push_s: float = 0.0, host_pull_s: float = 0.0,
              exposed_share: float = 0.0) -> float:
  """Compute, push, update, pull; with overlap the push hides behind compute.

  host_push_s, host_pull_s: the host's own work of moving one direction's
  bytes, which goes on while the link carries them except for each
  message's first chunk (emulated_direction_s; exposed_share is that
  chunk's part of a message).
  """
  link = ps_direction_s(model_bytes, bandwidth, num_workers, num_shards, latency_s,
                        largest_shard_bytes)
  push = emulated_direction_s(link, host_push_s, exposed_share)
  pull = emulated_direction_s(link, host_pull_s, exposed_share)
  if overlap:
    return max(compute_s, push) + update_s + pull
  return compute_s + push + update_s + pull


def spmd_step_s(compute_s: float, model_bytes: float, bandwidth: float,
                num_workers: int, *, latency_s: float = 0.0,
                overlap: bool = False) -> float:
  """Compute and a ring all-reduce of the gradients (overlapped or not)."""
  comm = ring_allreduce_s(model_bytes, bandwidth, num_workers, latency_s)
  return max(compute_s, comm) if overlap else compute_s + comm


def link_bound(model_bytes: float, bandwidth: float, compute_s: float) -> bool:
  """Whether one worker's own traffic, S/B per direction, takes longer than
  its compute T_C: then no number of shards hides it, only a faster link."""
  return not math.isinf(bandwidth) and model_bytes / bandwidth > compute_s


def bandwidth_to_hide(model_bytes: float, compute_s: float) -> float:
  """The link (bytes/s) at which one worker's traffic just hides behind its
  compute: S/T_C."""
  return model_bytes / compute_s


def min_ps_shards(model_bytes: float, bandwidth: float, num_workers: int,
                  compute_s: float) -> int:
  """Lemma: shards needed so one direction's traffic takes no longer than
  the compute, N_ps >= ceil(N_w*S/(B*T_C)); at least 1, and at most N_w:
  with N_w shards a shard's link carries what a worker's does, so more
  shards buy nothing (when even that is too slow, the job is link_bound)."""
  if math.isinf(bandwidth):
    return 1
  needed = math.ceil(num_workers * model_bytes / (bandwidth * compute_s))
  return max(1, min(needed, num_workers))


def max_scaling_workers(model_bytes: float, bandwidth: float, num_shards: int,
                        compute_s: float) -> float:
  """Lemma: the most workers whose traffic still fits behind the compute,
  N_w <= N_ps*B*T_C/S (inf for unlimited bandwidth); 0 when the job is
  link_bound, since then not even one worker's traffic fits."""
  if math.isinf(bandwidth):
    return math.inf
  if link_bound(model_bytes, bandwidth, compute_s):
    return 0
  return math.floor(num_shards * bandwidth * compute_s / model_bytes)


def choose_batch_size(throughput: dict, tolerance: float = 0.05) -> int:
  """The smallest batch whose throughput is within `tolerance` of the best.

  `throughput` maps batch size -> images/s for the sizes that fit; a larger
  batch costs memory and generalisation, so take the knee, not the peak.
  """
  if not throughput:
    raise ValueError('no batch size fits: the sweep measured nothing')
  best = max(throughput.values())
  return min(b for b, value in throughput.items() if value >= (1 - tolerance) * best)
