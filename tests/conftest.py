"""Test-wide set-up: 8 emulated CPU devices, set before jax is imported."""

import os

os.environ['XLA_FLAGS'] = (
    os.environ.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.fixture(scope='session')
def shapes_dir(tmp_path_factory):
  """Where the shapes data set is generated once for the whole session."""
  return str(tmp_path_factory.mktemp('data') / 'shapes')
