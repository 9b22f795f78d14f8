"""The planner on hosts of several devices: the cluster formulas on
hand-computed cases and at their edges, the plan's answers, and the
plan.* keys' bad inputs."""

import dataclasses
import math

import pytest

from cli import validation
from configs import default
from core import units
from core.errors import UsageError
from planner import cluster_model as cm
from planner import formulas
from planner import recommend

MB = 1e6
GBIT = units.gbps_to_bytes_per_s(1.0)


def hosts(h, g, nic=1.0, intra=10.0, nic_latency=0.0, intra_latency=0.0):
  """H hosts of G devices; links in Gbit/s (0: unlimited), latencies in s."""
  return cm.Cluster(h, g, nic * GBIT if nic else math.inf, nic_latency,
                    intra * GBIT if intra else math.inf, intra_latency)


# --- The flat case: one device per host is formulas.py, to the bit. ---------

@pytest.mark.parametrize('n', [1, 2, 3, 4, 16, 64])
@pytest.mark.parametrize('latency', [0.0, 5e-5])
def test_one_device_per_host_gives_exactly_the_flat_formulas(n, latency):
  size, compute = 97.3 * MB, 0.37
  flat = hosts(n, 1, nic=10, nic_latency=latency)
  bandwidth = 10 * GBIT
  ring = formulas.ring_allreduce_s(size, bandwidth, n, latency)
  assert cm.allreduce_s(size, flat, 'ring') == ring
  assert cm.allreduce_s(size, flat, 'hierarchical') == ring
  for shards in (1, 2, 3, n, 2 * n):
    assert cm.ps_direction_s(size, flat, shards) == formulas.ps_direction_s(
        size, bandwidth, n, shards, latency)
    assert cm.ps_direction_s(size, flat, shards, largest_shard_bytes=40 * MB) == (
        formulas.ps_direction_s(size, bandwidth, n, shards, latency, 40 * MB))
    for overlap in (False, True):
      assert cm.step_s('ps', compute, size, flat, num_shards=shards, update_s=0.01,
                       overlap=overlap) == formulas.ps_step_s(
                           compute, size, bandwidth, n, shards, latency_s=latency,
                           update_s=0.01, overlap=overlap)
  for overlap in (False, True):
    assert cm.step_s('ring', compute, size, flat, overlap=overlap) == formulas.spmd_step_s(
        compute, size, bandwidth, n, latency_s=latency, overlap=overlap)
  for compute_s in (0.01, 0.1, 0.37, 5.0):
    assert cm.min_ps_shards(size, flat, compute_s) == formulas.min_ps_shards(
        size, bandwidth, n, compute_s)


# --- All-reduce over hosts. --------------------------------------------------

def test_flat_ring_over_hosts_waits_for_its_slowest_edge():
  # 4 hosts of 2, 100 MB: each of 2*7 steps sends 12.5 MB. An edge between
  # hosts: 12.5 MB / 125 MB/s = 0.1 s; inside one at 10 Gbit/s: 0.01 s.
  assert cm.ring_allreduce_parts(100 * MB, hosts(4, 2)) == {'nic': pytest.approx(1.4)}
  assert cm.allreduce_s(100 * MB, hosts(4, 2, nic_latency=0.001), 'ring') == (
      pytest.approx(14 * 0.101))
  # A fabric slower than the NIC (0.5 Gbit/s: 0.2 s an edge) sets the pace.
  assert cm.ring_allreduce_parts(100 * MB, hosts(4, 2, intra=0.5)) == {
      'intra_host': pytest.approx(2.8)}


def test_one_host_all_reduces_over_its_fabric_only():
  # 4 devices, 100 MB at 10 Gbit/s: 2*3 steps of 25 MB / 1250 MB/s.
  assert cm.ring_allreduce_parts(100 * MB, hosts(1, 4)) == {'intra_host': pytest.approx(0.12)}
  assert cm.hierarchical_allreduce_parts(100 * MB, hosts(1, 4)) == {
      'intra_host': pytest.approx(0.12)}
  assert cm.allreduce_s(100 * MB, hosts(1, 4, intra=0), 'ring') == 0.0
  assert cm.allreduce_s(100 * MB, hosts(1, 1), 'ring') == 0.0  # one device


def test_hierarchical_all_reduce_crosses_the_nics_in_2_h_minus_1_steps():
  # 4 hosts of 2: inside, 2*1 steps of 50 MB at 1250 MB/s = 0.08 s; across,
  # 2*3 steps in which the NIC carries 100/4 MB: 6 * 0.2 s = 1.2 s.
  parts = cm.hierarchical_allreduce_parts(100 * MB, hosts(4, 2))
  assert parts == {'intra_host': pytest.approx(0.08), 'nic': pytest.approx(1.2)}
  with_latency = hosts(4, 2, nic_latency=0.001, intra_latency=0.0001)
  assert cm.allreduce_s(100 * MB, with_latency, 'hierarchical') == pytest.approx(
      2 * 0.0401 + 6 * 0.201)


@pytest.mark.parametrize('algorithm', ['ring', 'hierarchical'])
@pytest.mark.parametrize('h,g', [(1, 4), (4, 1), (4, 2), (3, 4), (8, 8)])
def test_all_reduce_agrees_with_the_emulated_rings_link_time(algorithm, h, g):
  c = hosts(h, g, nic=2, intra=20, nic_latency=1e-4, intra_latency=1e-5)
  phases = cm.allreduce_phases(50 * MB, c, algorithm)
  assert cm.allreduce_s(50 * MB, c, algorithm) == pytest.approx(
      sum(count * seconds for count, _, seconds, _ in phases))


# --- PS over hosts. ----------------------------------------------------------

def test_dedicated_servers_carry_every_workers_share_the_hosts_nic_g_times_s():
  # 4 hosts of 2 (8 workers), 100 MB on 1 Gbit/s (125 MB/s).
  c = hosts(4, 2)
  # One shard: its NIC carries 8 x 100 MB = 6.4 s.
  assert cm.ps_direction_parts(100 * MB, c, 1) == {'server_nic': pytest.approx(6.4)}
  # One shard per host: 8 x 25 MB = a host's 2 x 100 MB = 1.6 s.
  assert cm.ps_direction_parts(100 * MB, c, 4) == {'nic': pytest.approx(1.6)}
  # More shards than hosts: the hosts' NIC still carries 2 x 100 MB.
  assert cm.ps_direction_parts(100 * MB, c, 8) == {'nic': pytest.approx(1.6)}
  assert cm.ps_direction_s(100 * MB, hosts(4, 2, nic_latency=0.001), 8) == (
      pytest.approx(1.601))


def test_colocated_servers_share_the_nics_with_their_hosts_workers():
  c = hosts(4, 2)  # 8 workers, 100 MB, 125 MB/s NICs, 1250 MB/s ports
  # A shard a host (25 MB each): a host sends 2 x 75 MB and receives 6 x 25 MB.
  assert cm.ps_direction_parts(100 * MB, c, 4, 'colocated') == {
      'nic': pytest.approx(1.2), 'intra_host': pytest.approx(0.02)}
  # Fewer shards than hosts: a host without one sends 2 x 100 MB, the one
  # with it receives 6 x 100 MB.
  assert cm.ps_direction_s(100 * MB, c, 1, 'colocated') == pytest.approx(4.8)
  # More shards than hosts, unevenly (2, 2, 1, 1 of 6): the host with one
  # sends 2 x (100 - 100/6) MB, a host with two receives 6 x 200/6 MB.
  assert cm.ps_direction_s(100 * MB, c, 6, 'colocated') == pytest.approx(1.6)
  assert cm.ps_direction_s(100 * MB, hosts(4, 2, nic_latency=0.001), 4, 'colocated') == (
      pytest.approx(1.201))


def test_colocated_ps_on_one_device_hosts_moves_what_a_ring_all_reduce_does():
  # N shards on N hosts: each direction (N-1)/N * S per NIC; both together
  # the ring's 2(N-1)/N * S.
  c = hosts(4, 1)
  two_ways = 2 * cm.ps_direction_s(100 * MB, c, 4, 'colocated')
  assert two_ways == pytest.approx(cm.allreduce_s(100 * MB, c, 'ring'))


def test_colocated_servers_on_one_host_use_only_its_fabric():
  assert cm.ps_direction_parts(100 * MB, hosts(1, 4), 2, 'colocated') == {
      'intra_host': pytest.approx(0.08)}
  assert cm.ps_direction_s(100 * MB, hosts(1, 4, intra=0), 2, 'colocated') == 0.0
  assert cm.step_s('ps', 0.5, 100 * MB, hosts(1, 1, intra=0), num_shards=3,
                   placement='colocated', update_s=0.1) == pytest.approx(0.6)


def test_unlimited_links_cost_only_their_latency():
  free = hosts(4, 2, nic=0, intra=0, nic_latency=0.001, intra_latency=0.0001)
  assert cm.allreduce_s(100 * MB, free, 'ring') == pytest.approx(14 * 0.001)
  assert cm.allreduce_s(100 * MB, free, 'hierarchical') == pytest.approx(
      2 * 0.0001 + 6 * 0.001)
  assert cm.ps_direction_s(100 * MB, free, 3) == pytest.approx(0.001)
  assert cm.ps_direction_s(100 * MB, free, 3, 'colocated') == pytest.approx(0.001)
  assert cm.min_ps_shards(100 * MB, free, 0.1) == 1


def test_step_parts_name_what_the_time_goes_to():
  c = hosts(4, 2)
  step, parts = cm.step_parts('ps', 1.0, 100 * MB, c, num_shards=1, update_s=0.2)
  assert step == pytest.approx(1.0 + 6.4 + 0.2 + 6.4)
  assert parts == {'compute': 1.0, 'servers_update': 0.2,
                   'server_nic': pytest.approx(12.8)}
  assert cm.limiting_resource(parts) == 'server_nic'
  step, parts = cm.step_parts('hierarchical', 2.0, 100 * MB, c, overlap=True)
  assert step == 2.0 and cm.limiting_resource(parts) == 'compute'
  with pytest.raises(ValueError, match='unknown'):
    cm.step_parts('tree', 1.0, 1.0, c)
  with pytest.raises(ValueError, match='unknown PS placement'):
    cm.ps_direction_s(1.0, c, 1, 'nearby')


def test_shards_needed_on_hosts():
  # Dedicated: N*S/(B*T_C) = 8 x 10 MB / (125 MB/s x 0.4 s) = 1.6 -> 2.
  assert cm.min_ps_shards(10 * MB, hosts(4, 2), 0.4) == 2
  # A host's own 2 x 100 MB outlast T_C: one shard a host, no more.
  assert cm.min_ps_shards(100 * MB, hosts(4, 2), 0.4) == 4
  # Colocated, 10 MB, 8 workers on 4 hosts: a direction takes 0.48, 0.24,
  # 0.16, 0.12 s with 1..4 shards.
  assert cm.min_ps_shards(10 * MB, hosts(4, 2), 0.2, 'colocated') == 3
  assert cm.min_ps_shards(10 * MB, hosts(4, 2), 0.1, 'colocated') == 4  # none fits: the best
  assert cm.min_ps_shards(10 * MB, hosts(1, 4), 0.1, 'colocated') == 1


def test_most_hosts_that_scale():
  assert cm.max_scaling_hosts(lambda h: 1.0 / h, 0.3) == 3
  assert cm.max_scaling_hosts(lambda h: 0.5, 0.8) == 0
  assert cm.max_scaling_hosts(lambda h: 1.0, 0.8, limit=16) is None


# --- The plan's answers. -----------------------------------------------------

def _recommend(compute_by_batch, size, cluster, **kw):
  options = dict(strategies=['ring', 'hierarchical', 'ps'], placement='dedicated',
                 update_s=0.0, overlap=False)
  options.update(kw)
  return recommend.recommend(compute_by_batch, size, cluster, **options)


def test_a_communication_bound_job_is_told_to_grow_its_batch():
  # 16 one-device hosts on 10 Gbit/s, 100 MB: the ring takes
  # 2 * 15/16 * 0.08 s = 0.15 s; T_C is 1.1 ms an image. 80% needs
  # T_C >= 4 * 0.15 s: 546 images a device, far past the largest tried.
  cluster = hosts(16, 1, nic=10)
  rec = _recommend({b: 0.0011 * b for b in (8, 16, 32, 64)}, 100 * MB, cluster)
  assert rec['per_device_batch'] == 64
  assert rec['strategy'] == 'ring'
  assert rec['no_batch_scales'] and rec['batch_to_scale'] == 546
  assert rec['max_hosts_that_scale'] == 1 and rec['scaling_limited_by'] == 'nic'
  assert rec['link_bound']  # S/B = 0.08 s > T_C = 70 ms
  lines = recommend.words(rec, cluster, placement='dedicated', largest_batch=64,
                          stopped_by_memory=False, memory_gib=None, nic_gbps=10)
  text = '\n'.join(lines)
  assert 'per-device batch: 64' in text and 'use: ring all-reduce' in text
  assert 'about 546' in text and 'larger ones were not tried' in text


def test_a_compute_bound_job_keeps_the_smallest_batch_and_scales():
  # 1 MB at 10 Gbit/s against T_C of 10 ms an image: communication is small.
  cluster = hosts(4, 8, nic=10, intra=100, nic_latency=5e-5)
  rec = _recommend({b: 0.01 * b for b in (8, 16, 32)}, 1 * MB, cluster)
  assert rec['per_device_batch'] == 8 and not rec['no_batch_scales']
  assert rec['strategy'] == 'hierarchical' and rec['efficiency'] > 0.95
  # 80% of T_C = 80 ms allows 20 ms of all-reduce: 2*7 steps of 10 us
  # inside, 2(H-1) * (0.8 ms/H + 50 us) across: H = 183 fits, 184 not.
  assert rec['max_hosts_that_scale'] == 183 and rec['scaling_limited_by'] == 'nic'
  # Without latency the NICs' bytes, at most 2S/B = 1.6 ms, never stop it.
  rec = _recommend({8: 0.08}, 1 * MB, hosts(4, 8, nic=10, intra=100))
  assert rec['max_hosts_that_scale'] is None and rec['scaling_limited_by'] == 'compute'


def test_ps_shards_also_split_the_servers_update():
  # Unlimited links: a step is T_C = 1 s plus the update, 0.8 s with one
  # shard. 8 shards (one a device) give 1.1 s; 6 give 1.133 s, within 5% of
  # it, and 5 give 1.16 s.
  cluster = hosts(2, 4, nic=0, intra=0)
  assert recommend.ps_shards(1.0, 10 * MB, cluster, placement='dedicated', update_s=0.8,
                             overlap=False) == 6


# --- The hosts' CPU cores: the input pipeline as a resource. ----------------

def _with_cores(cluster, cores, cpu_ms):
  return dataclasses.replace(cluster, host_cores=cores, host_cpu_s_per_image=cpu_ms / 1e3)


def test_a_hosts_cores_take_g_times_b_times_the_cost_over_c_a_step():
  # 8 devices of batch 128 at 1.2 CPU-ms an image on 16 cores:
  # 8 * 128 * 0.0012 / 16 = 0.0768 s a step.
  cluster = _with_cores(hosts(2, 8), 16, 1.2)
  assert cm.host_input_s(cluster, 128) == pytest.approx(0.0768)
  assert cm.host_input_s(hosts(2, 8), 128) == 0.0  # cores not counted
  # The step waits for input only when it is the longer: 0.1 s of T_C.
  step, parts = cm.step_parts('ring', 0.05, 0.0, cluster, input_s=0.0768)
  assert step == pytest.approx(0.0768) and parts['host_cpu'] == pytest.approx(0.0768)
  step, parts = cm.step_parts('ring', 0.1, 0.0, cluster, input_s=0.0768)
  assert step == 0.1 and 'host_cpu' not in parts


def test_devices_that_outrun_the_hosts_cores_are_input_bound_and_capped():
  # One host of 8 devices on unlimited links, T_C = 0.1 s at batch 128: the
  # devices take 8 * 128 / 0.1 = 10,240 images/s. 8 cores at 1.2 CPU-ms
  # decode 8 / 0.0012 = 6,667 images/s: a step waits 0.1536 s for input;
  # feeding the devices takes ceil(10,240 * 0.0012) = ceil(12.29) = 13 cores.
  bound = _with_cores(hosts(1, 8, nic=0, intra=0), 8, 1.2)
  rec = _recommend({128: 0.1}, 10 * MB, bound)
  assert rec['input_bound'] and rec['limited_by_now'] == 'host_cpu'
  assert rec['step_s'] == pytest.approx(0.1536)
  assert rec['images_per_sec'] == pytest.approx(8000 / 1.2)
  assert rec['efficiency'] == pytest.approx(0.1 / 0.1536)
  assert rec['device_images_per_sec_per_host'] == pytest.approx(10240)
  assert rec['host_cores_needed'] == 13
  text = '\n'.join(recommend.words(rec, bound, placement='dedicated', largest_batch=128,
                                   stopped_by_memory=False, memory_gib=None, nic_gbps=10))
  assert "input-bound: the host's 8 cores decode at most 6,667 images/s" in text
  assert 'its devices take 10,240; feeding them takes 13 cores' in text
  assert 'capped at what the cores decode, 6667 images/s' in text
  assert 'or 13 host cores' in text and 'faster network' not in text
  # 16 cores decode 13,333 images/s: they keep up, and say how many work.
  fed = _with_cores(hosts(1, 8, nic=0, intra=0), 16, 1.2)
  rec = _recommend({128: 0.1}, 10 * MB, fed)
  assert not rec['input_bound'] and rec['images_per_sec'] == pytest.approx(10240)
  text = '\n'.join(recommend.words(rec, fed, placement='dedicated', largest_batch=128,
                                   stopped_by_memory=False, memory_gib=None, nic_gbps=10))
  assert "the host's 16 cores keep up" in text and '(13 cores busy)' in text
  # Cores not counted: no word about them.
  rec = _recommend({128: 0.1}, 10 * MB, hosts(1, 8, nic=0, intra=0))
  assert not rec['input_bound'] and rec['host_cores_needed'] is None


# --- Bad inputs: one line naming the key. ------------------------------------

@pytest.mark.parametrize('key,value,fragment', [
    ('devices_per_host', 0, 'plan.devices_per_host=0 must be >= 1'),
    ('devices_per_host', 3, 'does not divide plan.num_workers=16'),
    ('intra_host_gbps', -1.0, 'plan.intra_host_gbps'),
    ('intra_host_gbps', math.inf, 'plan.intra_host_gbps'),
    ('intra_host_latency_ms', -0.5, 'plan.intra_host_latency_ms'),
    ('device_memory_gib', math.nan, 'plan.device_memory_gib'),
    ('ps_placement', 'nearby', 'plan.ps_placement'),
    ('allreduce_algorithms', ' , ', 'plan.allreduce_algorithms'),
    ('allreduce_algorithms', 'ring,tree', "plan.allreduce_algorithms='tree'"),
    ('compute_s_batch', -1, 'plan.compute_s_batch'),
    ('compute_s_batch', 8, 'set plan.compute_s too'),
    ('host_cores', -1, 'plan.host_cores=-1 must be >= 0'),
    ('host_cpu_ms_per_image', 0.0, 'plan.host_cpu_ms_per_image=0.0 must be'),
    ('host_cpu_ms_per_image', -1.5, 'plan.host_cpu_ms_per_image'),
    ('host_cpu_ms_per_image', math.nan, 'plan.host_cpu_ms_per_image'),
    ('host_cpu_ms_per_image', math.inf, 'plan.host_cpu_ms_per_image'),
])
def test_bad_cluster_inputs_are_refused_in_one_line(key, value, fragment):
  config = default.get_config()
  config.plan.num_workers = 16
  config.plan[key] = value
  with pytest.raises(UsageError) as error:
    validation.check_config(config)
  assert fragment in str(error.value) and '\n' not in str(error.value)


def test_overlap_hides_communication_behind_the_backward_pass_only():
  # T_C 0.9 s: the backward pass is its last 0.6 s. A 0.5 s all-reduce
  # hides; a 0.8 s one sticks out by 0.2 s. Share 1 is formulas.py's max.
  c = hosts(2, 1, nic=1)  # 2 workers: the ring moves S/B = 8 ms per MB
  share = cm.BACKPROP_SHARE
  for megabytes, step in ((62.5, 0.9), (100, 1.1)):
    assert cm.step_s('ring', 0.9, megabytes * MB, c, overlap=True, overlap_share=share) == (
        pytest.approx(step))
  assert cm.step_s('ring', 0.9, 100 * MB, c, overlap=True) == pytest.approx(0.9)


def test_the_plan_says_when_the_memory_limit_stops_the_batch():
  cluster = hosts(16, 1, nic=10)
  rec = _recommend({8: 0.0088, 16: 0.0176}, 100 * MB, cluster)
  lines = recommend.words(rec, cluster, placement='dedicated', largest_batch=16,
                          stopped_by_memory=True, memory_gib=80.0, nic_gbps=10)
  assert any('that fits the device memory (80 GiB; up to 16)' in line for line in lines)


def test_plot_labels_are_plain_numbers():
  from planner import plan  # pylint: disable=g-import-not-at-top
  assert [plan._plain(v) for v in (2.0, 0.5, 64.0, 60000.0)] == ['2', '0.5', '64', '60,000']


def test_the_fewest_bytes_a_host_nic_carries_for_ps():
  # One shard a host: dedicated, a host's 2 workers' 100 MB each; colocated,
  # what they send to the other 3 hosts' shards (and as much arriving).
  assert cm.ps_host_bytes(100 * MB, hosts(4, 2)) == pytest.approx(200 * MB)
  assert cm.ps_host_bytes(100 * MB, hosts(4, 2), 'colocated') == pytest.approx(150 * MB)
  assert cm.ps_host_bytes(100 * MB, hosts(1, 4), 'colocated') == 0.0
  assert cm.ps_host_bytes(100 * MB, hosts(16, 1)) == 100 * MB  # the flat lemma's S
