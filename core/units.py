"""Link speeds: configs and reports say Gbit/s, the arithmetic uses bytes/s."""

import math

_BITS_PER_BYTE = 8


def gbps_to_bytes_per_s(gbps: float) -> float:
  """Bytes per second of a link of `gbps` Gbit/s; math.inf for 0 (unlimited)."""
  return gbps * 1e9 / _BITS_PER_BYTE if gbps > 0 else math.inf


def bytes_per_s_to_gbps(bytes_per_s: float) -> float:
  """Gbit/s of a link that moves `bytes_per_s` bytes per second."""
  return bytes_per_s * _BITS_PER_BYTE / 1e9
