"""trainer/process_spread.py: the process that holds a run back is named,
with its cause, from the figures every process measures; the agreement
carries them. The run of two processes with one slowed is in
test_launcher.py::test_two_by_four_trains_as_one_by_eight_and_one_device_evaluates_it."""

import numpy as np
import pytest

from configs import default
from coordination import agreement
from core.errors import UsageError
from trainer import debug_hooks
from trainer import process_spread


def test_a_process_waiting_for_input_is_named_with_input_as_its_cause():
  # Process 2 waits 0.2 s per step for input; the others are blocked as long
  # on their devices, whose collectives wait for it.
  record = process_spread.spread(step_s=[0.25, 0.25, 0.25, 0.25],
                                 input_wait_s=[0.0, 0.0, 0.2, 0.0],
                                 blocked_s=[0.21, 0.2, 0.005, 0.21])
  assert record['slow_process'] == 2 and record['cause'] == 'input'
  assert record['own_s'] == pytest.approx([0.04, 0.05, 0.245, 0.04])
  assert record['behind'] == pytest.approx((0.245 - 0.045) / 0.25)
  words = process_spread.in_words(record)
  assert words.startswith('process 2 of 4 holds the run back: 0.245 s of its own '
                          'per 0.250 s step against a median of 0.045 s (80% of the step')
  assert words.endswith('it waits for input (0.200 s per step)')


def test_a_process_whose_host_computes_slowly_is_named_with_compute():
  record = process_spread.spread(step_s=[0.3, 0.3], input_wait_s=[0.001, 0.002],
                                 blocked_s=[0.25, 0.01])
  assert record['slow_process'] == 1 and record['cause'] == 'compute'
  assert 'its host computes (input wait only 0.002 s per step)' in (
      process_spread.in_words(record))


def test_processes_within_a_tenth_of_a_step_of_the_median_name_no_one():
  record = process_spread.spread(step_s=[0.1, 0.1, 0.1], input_wait_s=[0.0, 0.0, 0.005],
                                 blocked_s=[0.09, 0.085, 0.08])
  assert record['slowest_process'] == 2 and record['behind'] == pytest.approx(0.05)
  assert record['slow_process'] == -1 and record['cause'] is None
  assert process_spread.in_words(record) is None


def test_the_figures_go_once_per_measured_interval():
  figures = process_spread.Figures()
  assert figures.take().tolist() == [0, 0, 0, 0]
  figures.measured(0.5, 0.25, 0.125)
  assert figures.take().tolist() == [1, 0.5, 0.25, 0.125]
  assert figures.take().tolist() == [0, 0, 0, 0]


def test_one_process_shares_no_figures():
  decided = agreement.Agreement(1, 10).decide_and_share(True, False, np.ones(4, np.float32))
  assert decided == (True, False, None)


def test_the_agreement_carries_the_figures_in_its_one_all_gather(monkeypatch):
  gathered = []

  def two_processes(mine):  # process 1 asks to stop and sends its figures
    gathered.append(mine)
    theirs = np.array([1, 0, 1, 0.3, 0.29, 0.0], np.float32)
    return np.stack([mine, theirs])
  monkeypatch.setattr(agreement, 'gather_from_processes', two_processes)
  stop, save, rows = agreement.Agreement(2, 10).decide_and_share(
      False, True, np.array([1, 0.3, 0.0, 0.28], np.float32))
  assert len(gathered) == 1 and (stop, save) == (True, True)
  np.testing.assert_allclose(rows, [[1, 0.3, 0.0, 0.28], [1, 0.3, 0.29, 0.0]])


@pytest.mark.parametrize('key,value', [
    ('slow_input_s', -0.5), ('slow_input_s', float('nan')), ('slow_step_s', float('inf')),
    ('slow_process', -2)])
def test_a_bad_slow_key_is_one_line_naming_it(key, value):
  config = default.get_config()
  config.debug[key] = value
  with pytest.raises(UsageError, match=f'debug.{key}'):
    debug_hooks.check_config(config)


def test_the_slow_keys_slow_only_the_named_process(monkeypatch):
  slept = []
  monkeypatch.setattr(debug_hooks.time, 'sleep', slept.append)
  config = default.get_config()
  config.debug.slow_input_s, config.debug.slow_step_s = 0.25, 0.5
  config.debug.slow_process = 1  # this test is process 0
  assert list(debug_hooks.slowed_stream(config, iter([1, 2]))) == [1, 2]
  debug_hooks.after_step(config, 1, stop=None)
  assert not slept
  config.debug.slow_process = 0
  assert list(debug_hooks.slowed_stream(config, iter([1, 2]))) == [1, 2]
  debug_hooks.after_step(config, 1, stop=None)
  assert slept == [0.25, 0.25, 0.5]
