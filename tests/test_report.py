"""modes/report.py's smoothing: TensorBoard's debiased moving average."""

import pytest

from modes import report


def test_the_moving_average_is_debiased_from_the_first_value():
  # By hand, as TensorBoard's smoothing computes it: after n values, the sum
  # of 0.5^(n-i) (1 - 0.5) v_i, divided by 1 - 0.5^n.
  assert report.moving_average([4.0, 2.0, 6.0], weight=0.5) == pytest.approx(
      [4.0, (1.0 + 1.0) / 0.75, (0.5 + 0.5 + 3.0) / 0.875])


def test_a_constant_stays_constant():
  assert report.moving_average([3.0] * 5) == pytest.approx([3.0] * 5)
