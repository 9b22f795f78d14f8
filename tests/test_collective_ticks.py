"""benchmarks/collective_ticks.py: the kernel's tick read from its config,
the histogram of call durations and the share of calls on a tick."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), 'benchmarks'))
import collective_ticks  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_the_tick_is_config_hz_of_the_kernel_config():
  config = '# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=y\n'
  assert collective_ticks.kernel_hz(config) == 250
  assert collective_ticks.kernel_hz('CONFIG_NO_HZ=y\n') is None


def test_the_histogram_counts_each_duration_in_its_half_millisecond_bin():
  counts = collective_ticks.histogram([0.0001, 0.0004, 0.0006, 0.0041, 0.0039])
  assert counts == [2, 1, 0, 0, 0, 0, 0, 1, 1]
  assert sum(counts) == 5


def test_a_duration_is_on_a_tick_within_half_a_millisecond_of_whole_ticks():
  tick = 0.004
  # 4.2 and 7.7 ms lie within 0.5 ms of one and two ticks; 0.1 ms is near
  # zero ticks, which does not count; 6 ms is 2 ms from either.
  durations = [0.0042, 0.0077, 0.0001, 0.006]
  assert collective_ticks.share_on_ticks(durations, tick) == pytest.approx(0.5)
  assert collective_ticks.share_on_ticks([0.0036, 0.0044], tick) == pytest.approx(1.0)
