"""Emulated network links: real copies, paced in real time.

Every worker and every server shard has one `Interface` (a NIC) with a
bandwidth per direction (full duplex) and a one-way latency. A transfer
copies real bytes from the sender's buffers into the receiver's, in chunks;
each chunk is queued on the sender's transmit side and on the receiver's
receive side, each served at the bandwidth, and the sending thread sleeps
until both have passed it. Transfers that share an interface therefore share its bandwidth
(N workers pushing to one shard each get 1/N of it; a worker pushing to N
shards gives each 1/N of its own), transfers on different interfaces run
concurrently, and the PS bottlenecks of the literature emerge
in the measured wall clock instead of being computed. Sleeping costs no CPU,
so paced communication overlaps with compute as on a real cluster.
"""

import math
import threading
import time

import numpy as np

from core import units

# Pace in chunks of about this long: short enough that concurrent transfers
# interleave finely, long enough that a sleep's wake-up delay (~0.1 ms) is
# small against it.
_CHUNK_S = 0.002
_MIN_CHUNK_BYTES = 1 << 16


class _Direction:
  """One direction of an interface: when it is next free, and busy time."""

  def __init__(self):
    self.next_free = 0.0
    self.busy_s = 0.0


class Interface:
  """A network interface; bandwidth_gbps = 0 means unlimited (bytes_per_s
  is then math.inf)."""

  def __init__(self, name: str, bandwidth_gbps: float, latency_ms: float):
    self.name = name
    self.bytes_per_s = units.gbps_to_bytes_per_s(bandwidth_gbps)
    self.latency_s = latency_ms / 1e3
    self.tx = _Direction()
    self.rx = _Direction()
    self.tx_bytes = 0
    self.rx_bytes = 0

  def pop_counters(self) -> dict:
    """Bytes and busy seconds since the last call, per direction."""
    with _LOCK:
      counters = {'tx_bytes': self.tx_bytes, 'rx_bytes': self.rx_bytes,
                  'tx_busy_s': self.tx.busy_s, 'rx_busy_s': self.rx.busy_s}
      self.tx_bytes = self.rx_bytes = 0
      self.tx.busy_s = self.rx.busy_s = 0.0
    return counters


# One lock for all reservations: a reservation touches two interfaces, and
# it is a few arithmetic operations, so one lock costs nothing and cannot
# deadlock.
_LOCK = threading.Lock()


def _reserve(src: Interface, dst: Interface, nbytes: int, rate: float,
             previous_end: float | None = None) -> float:
  """Queues `nbytes` on src.tx and on dst.rx; returns when both have passed it.

  Each direction serves its queue at `rate`, independently of the other end
  (a switched network with buffers): a worker sending to four shards at
  once shares its own bandwidth four ways, and a shard receiving from four
  workers shares its own, without either waiting for the other to be idle.
  The first chunk of a transfer starts no earlier than now: a transfer on
  idle links gets no banked credit and takes its bytes over the bandwidth,
  as the formulas assume. A later chunk may start where the transfer's
  previous one ended (`previous_end`), however late its thread woke and
  copied it: a message is one stream, and the link did not lose that time.
  """
  duration = nbytes / rate
  with _LOCK:
    now = time.perf_counter()
    earliest = now if previous_end is None else min(now, previous_end)
    src.tx.next_free = max(earliest, src.tx.next_free) + duration
    dst.rx.next_free = max(earliest, dst.rx.next_free) + duration
    src.tx.busy_s += duration
    dst.rx.busy_s += duration
    return max(src.tx.next_free, dst.rx.next_free)


def chunk_bytes(bytes_per_s: float) -> int:
  """The bytes a transfer at this rate copies before it books them on the
  interfaces (about _CHUNK_S of them); 0 when the rate is unlimited."""
  if not math.isfinite(bytes_per_s):
    return 0
  return max(_MIN_CHUNK_BYTES, int(bytes_per_s * _CHUNK_S))


def _sleep_until(deadline: float) -> None:
  remaining = deadline - time.perf_counter()
  if remaining > 0:
    time.sleep(remaining)


def transfer(src: Interface, dst: Interface,
             copies: list[tuple[np.ndarray, np.ndarray]],
             wait_for_arrival: bool = True) -> float:
  """Moves every (destination, source) pair of arrays from src to dst.

  Returns the time (time.perf_counter) at which the last byte arrives: the
  paced time of all bytes plus the message's latency. With wait_for_arrival
  it returns only then; without, as soon as the last byte has left, so that
  messages sent one after another on one connection overlap their latencies
  as they do on a real network.
  """
  rate = min(src.bytes_per_s, dst.bytes_per_s)
  paced = math.isfinite(rate)
  chunk = chunk_bytes(rate)
  total, pending, last_end = 0, 0, time.perf_counter()
  previous_end = None  # where this transfer's last booked chunk ended
  copy_start = time.perf_counter()
  for destination, source in copies:
    # Contiguous row blocks of C-ordered arrays: flat views, no copies.
    destination, source = destination.reshape(-1), source.reshape(-1)
    total += destination.nbytes
    if not paced:
      np.copyto(destination, source)
      continue
    # The message is one byte stream: small arrays share a chunk, large ones
    # are cut into chunks, and each full chunk waits for its booked time
    # (copying it costs no wall time beyond that).
    step = max(1, chunk // destination.itemsize)
    for first in range(0, destination.size, step):
      last = min(first + step, destination.size)
      np.copyto(destination[first:last], source[first:last])
      pending += (last - first) * destination.itemsize
      if pending >= chunk:
        last_end = previous_end = _reserve(src, dst, pending, rate, previous_end)
        pending = 0
        _sleep_until(last_end)
  if pending:
    last_end = _reserve(src, dst, pending, rate, previous_end)
    _sleep_until(last_end)
  if not paced:
    copy_s = time.perf_counter() - copy_start
    with _LOCK:
      src.tx.busy_s += copy_s
      dst.rx.busy_s += copy_s
  with _LOCK:
    src.tx_bytes += total
    dst.rx_bytes += total
  # The last byte leaves at last_end (paced) or now (unlimited) and arrives
  # one latency later; latency does not occupy the interface.
  arrival = (last_end if paced else time.perf_counter()) + max(
      src.latency_s, dst.latency_s)
  if wait_for_arrival:
    _sleep_until(arrival)
  return arrival


def wait_until(arrival: float) -> None:
  """Sleeps until `arrival` (a time from `transfer`)."""
  _sleep_until(arrival)
