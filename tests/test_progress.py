"""Specification of the progress lines of long work (trainer/progress.py)."""

import pytest

from trainer import progress


@pytest.mark.parametrize('seconds,text', [
    (0.4, '0 s'), (45, '45 s'), (89, '89 s'), (90, '2 min'), (12 * 60, '12 min'),
    (89 * 60, '89 min'), (90 * 60, '1.5 h'), (10 * 3600, '10.0 h')])
def test_duration_text_rounds_to_a_unit_a_reader_plans_by(seconds, text):
  assert progress.duration_text(seconds) == text


def test_eta_is_the_mean_time_so_far_times_what_is_left():
  # 3 cells done in 120 s: 40 s each, 9 left.
  assert progress.eta_text(3, 12, 120.0) == 'ETA ~6 min'
  assert progress.eta_text(1, 3, 30.0) == 'ETA ~60 s'


@pytest.mark.parametrize('done,total', [(0, 5), (5, 5)])
def test_no_eta_before_the_first_or_after_the_last(done, total):
  assert progress.eta_text(done, total, 10.0) == ''


def test_done_line_names_the_item_its_time_and_the_eta():
  assert (progress.done_line('cell', 3, 12, 41.24, 'ETA ~6 min') ==
          'cell 3/12 done in 41.2 s, ETA ~6 min')
  assert progress.done_line('cell', 12, 12, 2.0) == 'cell 12/12 done in 2.0 s'


def test_every_is_due_once_per_interval():
  now = [100.0]
  every = progress.Every(10.0, clock=lambda: now[0])
  seen = []
  for t in (101, 109.9, 110, 111, 125, 126):
    now[0] = t
    seen.append(every.due())
  assert seen == [False, False, True, False, True, False]

