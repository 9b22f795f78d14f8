"""trainer/goodput.py: a run's wall time split into parts that add up, and
the steps a restart trains again counted as lost work of the run."""

import time

import pytest

from trainer import goodput


def _attempt(reached, marks, compute=8.0, wait=2.0, wall=20.0):
  parts = dict.fromkeys(goodput.PARTS, 0.0)
  parts.update(step_compute=compute, input_wait=wait, other=wall - compute - wait)
  return {'started_at': 0.0, 'wall_s': wall, 'parts': parts, 'first_step': 0,
          'reached_step': reached, 'step_marks': marks}


def test_the_steps_past_the_checkpoint_move_to_lost_work_in_the_steps_proportion():
  # Steps 0..10 took 1 s each (10 s: 8 compute, 2 waiting); the restart
  # resumes at step 6, so steps 7..10 (4 s) are lost.
  attempt = goodput.charge_redone_steps(_attempt(10, [[0, 0.0], [10, 10.0]]), 6)
  assert attempt['redone_steps'] == 4
  parts = attempt['parts']
  assert parts['lost_work'] == pytest.approx(4.0)
  assert parts['step_compute'] == pytest.approx(8.0 - 3.2)
  assert parts['input_wait'] == pytest.approx(2.0 - 0.8)
  assert sum(parts.values()) == pytest.approx(20.0)  # moved, not added


def test_a_restart_at_the_step_reached_loses_nothing():
  attempt = goodput.charge_redone_steps(_attempt(6, [[4, 3.0], [6, 5.0]]), 6)
  assert attempt['redone_steps'] == 0 and attempt['parts']['lost_work'] == 0.0


def test_marks_are_interpolated_between_and_held_beyond():
  marks = [[4, 2.0], [8, 6.0]]
  assert [goodput.interpolated_step_s(marks, s) for s in (2, 4, 6, 8, 9)] == [
      2.0, 2.0, 4.0, 6.0, 6.0]


def test_the_run_adds_its_attempts_and_says_so_in_words():
  first = goodput.charge_redone_steps(_attempt(10, [[0, 0.0], [10, 10.0]]), 6)
  run = goodput.summary([first, _attempt(20, [[6, 0.0], [20, 14.0]], compute=12.0,
                                         wait=2.0, wall=30.0)])
  assert run['wall_s'] == 50.0 and run['attempts'] == 2 and run['redone_steps'] == 4
  assert run['goodput'] == pytest.approx((4.8 + 12.0) / 50.0)
  words = goodput.in_words(run)
  assert words.startswith('goodput 34% of 50 s over 2 attempts (4 steps redone): ')
  assert 'lost work 8%' in words


def test_a_ledger_parts_sum_to_its_wall_time():
  ledger = goodput.Ledger(time.time() - 1.0)
  with ledger.timed('compile'):
    time.sleep(0.05)
  ledger.start_loop(0)
  time.sleep(0.05)
  ledger.after_step(1, total_wait_s=0.01)
  with ledger.timed('evaluation'):
    time.sleep(0.05)
  record = ledger.record()
  parts = record['parts']
  assert sum(parts.values()) == pytest.approx(record['wall_s'])
  assert parts['start_up'] >= 1.0 and parts['compile'] >= 0.05
  assert parts['input_wait'] == pytest.approx(0.01)
  assert parts['step_compute'] >= 0.03  # the evaluation is not a step's
  assert record['step_marks'][-1][0] == 1


def test_this_process_started_before_this_test_ran():
  # The kernel's start time of the test process: before its modules loaded.
  started = goodput.process_started_at()
  assert started <= goodput._LOADED_AT < time.time()  # pylint: disable=protected-access
  assert time.time() - started < 24 * 3600


def test_an_unreadable_ledger_file_starts_the_ledger_again(tmp_path):
  (tmp_path / goodput.FILE_NAME).write_text('{"attempts": [')  # cut short
  run_ledger = goodput.RunLedger(str(tmp_path), goodput.Ledger(time.time()), enabled=True)
  run_ledger.begin(resumed_at=0)
  assert [a['first_step'] for a in run_ledger.attempts()] == [0]
  run_ledger.write()
  assert len(goodput.read(str(tmp_path))) == 1
