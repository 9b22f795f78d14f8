"""The planner's cost model on hand-computed cases and at its edges."""

import math

import pytest

from core import units
from planner import formulas

MB = 1e6
GBIT = units.gbps_to_bytes_per_s(1.0)


def test_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_model():
  # 100 MB over 4 workers at 1 Gbit/s: 2*3/4 * 0.8 s = 1.2 s, plus 6 hops.
  assert formulas.ring_allreduce_s(100 * MB, GBIT, 4) == pytest.approx(1.2)
  assert formulas.ring_allreduce_s(100 * MB, GBIT, 4, latency_s=0.001) == pytest.approx(1.206)
  assert formulas.ring_allreduce_s(100 * MB, GBIT, 1) == 0.0  # one worker


def test_ps_direction_is_bound_by_the_worker_link_or_the_busiest_shard():
  # 100 MB = 0.8 s on one link. 4 workers, 1 shard: the shard carries 400 MB.
  assert formulas.ps_direction_s(100 * MB, GBIT, 4, 1) == pytest.approx(3.2)
  # 4 shards: each carries 4 * 25 MB, the same as a worker's own link.
  assert formulas.ps_direction_s(100 * MB, GBIT, 4, 4) == pytest.approx(0.8)
  # 8 shards cannot beat the worker's own link.
  assert formulas.ps_direction_s(100 * MB, GBIT, 4, 8) == pytest.approx(0.8)
  # An unbalanced partition: the largest shard decides.
  assert formulas.ps_direction_s(100 * MB, GBIT, 4, 4, largest_shard_bytes=40 * MB) == (
      pytest.approx(1.28))


def test_step_time_with_and_without_overlap():
  args = dict(model_bytes=100 * MB, bandwidth=GBIT, num_workers=4, num_shards=4)
  assert formulas.ps_step_s(1.0, update_s=0.1, **args) == pytest.approx(1.0 + 0.8 + 0.1 + 0.8)
  assert formulas.ps_step_s(1.0, update_s=0.1, overlap=True, **args) == pytest.approx(
      1.0 + 0.1 + 0.8)
  assert formulas.spmd_step_s(1.0, 100 * MB, GBIT, 4) == pytest.approx(2.2)
  assert formulas.spmd_step_s(1.0, 100 * MB, GBIT, 4, overlap=True) == pytest.approx(1.2)


def test_compute_time_from_a_device_peak():
  # 300 GFLOP per step on a 1000 TFLOP/s device at 40% of peak: 0.75 ms.
  assert formulas.compute_from_peak_s(300e9, 1000e12, 0.4) == pytest.approx(7.5e-4)
  assert formulas.compute_from_peak_s(300e9, 1000e12, 1.0) == pytest.approx(3e-4)


def test_shards_needed_and_workers_that_scale():
  # N_w*S/(B*T_C) = 8 * 10 MB / (125 MB/s * 0.4 s) = 1.6 -> 2 shards; with
  # 2 shards, 2 * 125 MB/s * 0.4 s / 10 MB = 10 workers scale.
  assert not formulas.link_bound(10 * MB, GBIT, 0.4)
  assert formulas.min_ps_shards(10 * MB, GBIT, 8, 0.4) == 2
  assert formulas.max_scaling_workers(10 * MB, GBIT, 2, 0.4) == 10
  assert formulas.max_scaling_workers(10 * MB, GBIT, 1, 0.4) == 5
  # One worker: one shard is enough whenever the worker link is.
  assert formulas.min_ps_shards(1 * MB, GBIT, 1, 0.4) == 1
  # Bandwidth so high that one shard suffices.
  assert formulas.min_ps_shards(100 * MB, 1e15, 64, 0.4) == 1
  assert formulas.min_ps_shards(100 * MB, math.inf, 64, 0.4) == 1
  assert formulas.max_scaling_workers(100 * MB, math.inf, 1, 0.4) == math.inf


def test_a_link_slower_than_the_compute_caps_the_shards_at_the_workers():
  # S/B = 100 MB / 125 MB/s = 0.8 s > T_C = 0.4 s: one worker's own link
  # cannot hide its traffic, so shards beyond N_w (16 by the bare formula)
  # buy nothing and no number of workers scales; S/T_C = 250 MB/s would.
  assert formulas.link_bound(100 * MB, GBIT, 0.4)
  assert formulas.min_ps_shards(100 * MB, GBIT, 8, 0.4) == 8
  assert formulas.max_scaling_workers(100 * MB, GBIT, 16, 0.4) == 0
  assert formulas.bandwidth_to_hide(100 * MB, 0.4) == pytest.approx(250 * MB)


def test_batch_size_is_the_smallest_within_five_percent_of_the_best():
  throughput = {8: 50.0, 16: 80.0, 32: 96.0, 64: 100.0, 128: 101.0}
  assert formulas.choose_batch_size(throughput) == 32  # 96 >= 0.95 * 101
  assert formulas.choose_batch_size(throughput, tolerance=0.0) == 128
  assert formulas.choose_batch_size({4: 10.0}) == 4


def test_a_model_that_fits_no_batch_has_no_batch_size():
  with pytest.raises(ValueError, match='no batch size fits'):
    formulas.choose_batch_size({})
