"""Which devices form a host, and the device sets each level of the probe uses.

A host is what shares one network interface: on a cluster, one machine
with its GPUs, driven by one process or by one process per GPU. So on GPUs
and TPUs the processes that report the same host name form one host. On
CPU every process is a host of its own: processes exchange their
collectives over gloo's TCP sockets even on one machine (loopback), as
separate machines would, while one process's emulated devices share its
memory. `probe.host_grouping` overrides the choice.

Levels (each a set of devices that run one collective together):
- intra_host: each host's devices, every host at once, as the first and
  last phase of a hierarchical all-reduce run;
- inter_host: the first device of every host: one message per host crosses
  the network, as in the middle phase of a hierarchical all-reduce (summed
  over the G rings it runs, the bytes a host's NIC carries are the same);
- all_devices: every device of every host in one collective, as flat data
  parallelism's gradient all-reduce.
"""

import dataclasses

LEVELS = ('intra_host', 'inter_host', 'all_devices')


def resolve_grouping(grouping: str, platform: str) -> str:
  """probe.host_grouping with 'auto' decided for the platform."""
  if grouping != 'auto':
    return grouping
  return 'process' if platform == 'cpu' else 'hostname'


def group_processes(host_names: list[str], grouping: str) -> list[list[int]]:
  """Hosts as lists of process indices, in order of their first process.

  host_names: each process's host name, by process index; grouping:
  'process' (each process alone) or 'hostname' (same name, same host).
  """
  if grouping == 'process':
    return [[i] for i in range(len(host_names))]
  hosts: dict[str, list[int]] = {}
  for index, name in enumerate(host_names):
    hosts.setdefault(name, []).append(index)
  return list(hosts.values())


@dataclasses.dataclass(frozen=True)
class Topology:
  """The job's devices grouped into hosts (lists of devices, in id order)."""
  hosts: tuple  # tuple of tuples of devices
  process_hosts: tuple  # tuple of tuples of process indices, as hosts
  grouping: str  # 'process' or 'hostname'

  def host_of_process(self, process_index: int) -> int:
    return next(h for h, members in enumerate(self.process_hosts) if process_index in members)

  def level_devices(self, level: str, process_index: int) -> list | None:
    """The devices of `level` that `process_index`'s devices take part in
    (for intra_host its own host's), or None when it takes no part."""
    if level == 'intra_host':
      devices = list(self.hosts[self.host_of_process(process_index)])
    elif level == 'inter_host':
      devices = [host[0] for host in self.hosts]
    elif level == 'all_devices':
      devices = [d for host in self.hosts for d in host]
    else:
      raise ValueError(f'unknown level {level!r}; one of {LEVELS}')
    return devices if any(d.process_index == process_index for d in devices) else None

  def participants(self, level: str) -> int:
    """p of `level` (intra_host: the largest host's devices)."""
    if level == 'intra_host':
      return max(len(h) for h in self.hosts)
    if level == 'inter_host':
      return len(self.hosts)
    return sum(len(h) for h in self.hosts)

  def skipped(self, level: str) -> str | None:
    """Why `level` is not measured in this job, or None when it is."""
    if level == 'intra_host' and self.participants('intra_host') < 2:
      return 'every host has one device: nothing to exchange inside a host'
    if level == 'inter_host' and len(self.hosts) < 2:
      return 'one host: nothing crosses the network'
    if level == 'all_devices':
      if len(self.hosts) < 2:
        return 'one host: the same devices as intra_host'
      if self.participants('intra_host') < 2:
        return 'one device per host: the same devices as inter_host'
    return None


def topology(devices, host_names: list[str], grouping: str) -> Topology:
  """The Topology of `devices` (every device of the job), whose processes
  run on `host_names` (by process index), grouped per `grouping`."""
  process_hosts = group_processes(host_names, grouping)
  hosts = tuple(tuple(sorted((d for d in devices if d.process_index in members),
                             key=lambda d: d.id))
                for members in process_hosts)
  return Topology(hosts=hosts, process_hosts=tuple(tuple(m) for m in process_hosts),
                  grouping=grouping)
