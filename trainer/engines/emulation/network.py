"""The emulated network, as a small typed spec instead of the whole config.

Both emulated engines and the planner's host timers build their links from
a `NetworkSpec`: the engines from `network.*` (`from_config`), the planner
with `unlimited()` links, to time the host's own work without the bandwidth.
"""

import dataclasses

from trainer.engines.emulation import topology


def num_workers(network_config, num_devices: int) -> int:
  """N_w: network.num_workers, or every device when it is 0."""
  return network_config.num_workers or num_devices


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
  """N_w workers, G to a host; each host's NIC and each worker's port into
  its host's fabric (Gbit/s per direction, 0: unlimited; one-way ms)."""
  num_workers: int
  devices_per_host: int = 1
  bandwidth_gbps: float = 0.0
  latency_ms: float = 0.0
  intra_host_gbps: float = 0.0
  intra_host_latency_ms: float = 0.0

  @classmethod
  def from_config(cls, network_config, num_devices: int) -> 'NetworkSpec':
    """The `network.*` section, N_w resolved against the devices present."""
    return cls(num_workers(network_config, num_devices),
               network_config.devices_per_host, network_config.bandwidth_gbps,
               network_config.latency_ms, network_config.intra_host_gbps,
               network_config.intra_host_latency_ms)

  def unlimited(self) -> 'NetworkSpec':
    """The same workers and hosts on links with no bandwidth limit or latency."""
    return NetworkSpec(self.num_workers, self.devices_per_host)

  def topology(self) -> topology.Topology:
    return topology.Topology(
        self.num_workers, self.devices_per_host, nic_gbps=self.bandwidth_gbps,
        nic_latency_ms=self.latency_ms, intra_host_gbps=self.intra_host_gbps,
        intra_host_latency_ms=self.intra_host_latency_ms)
