"""Emulated hosts: workers grouped G to a host, each host with one NIC.

A transfer between two workers of one host crosses the host's fabric
(NVLink or PCIe on a real machine): each worker device has its own port
into it, paced at the intra-host bandwidth. A transfer between hosts
crosses both hosts' NICs, which all of a host's workers share. With one
worker per host (the default) every worker has a NIC of its own, the flat
cluster of the parameter-server literature.
"""

from trainer.engines.emulation import link


class Topology:
  """Which host each worker lives on, and the interfaces a transfer uses."""

  def __init__(self, num_workers: int, devices_per_host: int, *,
               nic_gbps: float, nic_latency_ms: float,
               intra_host_gbps: float = 0.0, intra_host_latency_ms: float = 0.0):
    if devices_per_host < 1 or num_workers % devices_per_host:
      raise ValueError(f'{num_workers} workers do not make hosts of {devices_per_host}')
    self.num_workers = num_workers
    self.devices_per_host = devices_per_host
    self.num_hosts = num_workers // devices_per_host
    self.nics = [link.Interface(f'host{h}' if devices_per_host > 1 else f'worker{h}',
                                nic_gbps, nic_latency_ms)
                 for h in range(self.num_hosts)]
    # A host of one has no fabric: its worker talks through the NIC only.
    self.ports = [link.Interface(f'worker{i}-port', intra_host_gbps, intra_host_latency_ms)
                  for i in range(num_workers)] if devices_per_host > 1 else []

  def host_of(self, worker: int) -> int:
    return worker // self.devices_per_host

  def workers_of(self, host: int) -> list[int]:
    g = self.devices_per_host
    return list(range(host * g, (host + 1) * g))

  def nic_of(self, worker: int) -> link.Interface:
    return self.nics[self.host_of(worker)]

  def route(self, a: int, b: int) -> tuple[link.Interface, link.Interface]:
    """(sender's, receiver's) interface of a transfer from worker a to b."""
    if a != b and self.host_of(a) == self.host_of(b):
      return self.ports[a], self.ports[b]
    return self.nic_of(a), self.nic_of(b)

  def interfaces(self) -> list[link.Interface]:
    return self.nics + self.ports
