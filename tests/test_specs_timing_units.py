"""The small shared helpers: the batch spec, timed runs, link units and
XLA's FLOP count, each defined once (trainer/specs.py, timing.py, units.py,
mfu.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainer import mfu
from trainer import specs
from core import timing
from core import units
from trainer.engines.emulation import link


def test_batch_spec_is_bytes_images_and_int_labels_of_the_batch_size():
  spec = specs.batch_spec(4, 16)
  assert spec['image'].shape == (4, 16, 16, 3) and spec['image'].dtype == np.uint8
  assert spec['label'].shape == (4,) and spec['label'].dtype == np.int32


def test_a_random_batch_has_the_spec_s_shapes_and_labels_below_num_classes():
  batch = specs.random_batch(6, 8, np.random.default_rng(0), num_classes=3)
  spec = specs.batch_spec(6, 8)
  for key in spec:
    assert batch[key].shape == spec[key].shape and batch[key].dtype == spec[key].dtype
  assert set(np.unique(batch['label'])) <= {0, 1, 2}


def test_timed_runs_skip_the_first_call_and_time_each_other_one(monkeypatch):
  # A fake clock: the k-th call of fn takes k seconds.
  clock, calls = [0.0], []

  def fn():
    calls.append(None)
    clock[0] += len(calls)

  monkeypatch.setattr(timing.time, 'perf_counter', lambda: clock[0])
  assert timing.timed_runs(fn, 3) == [2.0, 3.0, 4.0]
  assert len(calls) == 4
  calls.clear()
  assert timing.median_s(fn, 3) == 3.0
  calls.clear()
  assert timing.best_s(fn, 3) == 2.0


def test_gbit_per_s_converts_to_bytes_per_s_and_zero_means_unlimited():
  assert units.gbps_to_bytes_per_s(8.0) == pytest.approx(1e9)
  assert units.gbps_to_bytes_per_s(0.0) == math.inf
  assert units.bytes_per_s_to_gbps(units.gbps_to_bytes_per_s(2.5)) == pytest.approx(2.5)
  # The emulated links use the same conversion.
  assert link.Interface('nic', 8.0, 0.0).bytes_per_s == pytest.approx(1e9)
  assert link.Interface('nic', 0.0, 0.0).bytes_per_s == math.inf


def test_an_unlimited_link_still_moves_the_bytes_in_one_go():
  assert link.chunk_bytes(math.inf) == 0  # no chunks: nothing to pace
  assert link.chunk_bytes(1.0) > 0  # however slow, a chunk has bytes
  source, target = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
  link.transfer(link.Interface('a', 0.0, 0.0), link.Interface('b', 0.0, 0.0),
                [(target, source)])
  np.testing.assert_array_equal(target, source)


def test_xla_flops_counts_a_matmul_lowered_or_compiled():
  n = 32
  spec = jax.ShapeDtypeStruct((n, n), np.float32)
  lowered = jax.jit(lambda a: jnp.dot(a, a)).lower(spec)
  assert mfu.xla_flops(lowered) == pytest.approx(2 * n**3, rel=0.05)
  assert mfu.xla_flops(lowered.compile()) == pytest.approx(2 * n**3, rel=0.05)
