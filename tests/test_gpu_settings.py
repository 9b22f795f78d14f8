"""Specification of cli/gpu_settings.py and its use in cli/runtime.py: the
environment a GPU run gets (XLA's overlap flags, the memory pool, NCCL on a
single host), the user's own settings winning, nothing applied off GPUs,
and every flag parsing in the pinned jaxlib (an unknown one aborts)."""

import os
import subprocess
import sys

import pytest

from cli import device_visibility as dv
from cli import gpu_settings
from cli import runtime
from tests.helpers import REPO

ALL_FLAGS = [f'{flag}={value}' for flag, value, _ in gpu_settings.XLA_GPU_FLAGS]


def test_a_gpu_run_gets_every_flag_the_memory_pool_and_single_host_nccl():
  changes = gpu_settings.gpu_environment({'XLA_FLAGS': '--xla_dump_to=/tmp/d'},
                                         single_host=True)
  assert changes['XLA_FLAGS'].split() == ['--xla_dump_to=/tmp/d'] + ALL_FLAGS
  assert changes['XLA_CLIENT_MEM_FRACTION'] == '0.9'
  assert changes['NCCL_PROTO'] == 'SIMPLE,LL,LL128'
  assert changes['NCCL_LL_BUFFSIZE'] == changes['NCCL_LL128_BUFFSIZE'] == '-2'


def test_the_users_own_settings_win():
  environ = {'XLA_FLAGS': '--xla_gpu_enable_latency_hiding_scheduler=false',
             'XLA_PYTHON_CLIENT_MEM_FRACTION': '.5', 'NCCL_PROTO': 'SIMPLE'}
  changes = gpu_settings.gpu_environment(environ, single_host=True)
  flags = changes['XLA_FLAGS'].split()
  assert flags[0] == '--xla_gpu_enable_latency_hiding_scheduler=false'
  assert not any(f.startswith('--xla_gpu_enable_latency_hiding_scheduler=true') for f in flags)
  # jaxlib refuses both memory-fraction names at once: ours stays out.
  assert 'XLA_CLIENT_MEM_FRACTION' not in changes
  assert 'NCCL_PROTO' not in changes


def test_a_job_over_several_hosts_gets_no_single_host_nccl_settings():
  changes = gpu_settings.gpu_environment({}, single_host=False)
  assert not any(name.startswith('NCCL_') for name in changes)


def _view(visible, local=1, processes=1):
  shape = dv.JobShape('slurm', 0, local, processes)
  return dv.choose(shape, visible, None)


def test_nothing_is_applied_without_a_gpu_a_cuda_plugin_or_with_jax_platforms_cpu(
    monkeypatch):
  environ = {}
  assert runtime.apply_gpu_settings(_view(8), environ) == {}  # no CUDA plugin here
  monkeypatch.setattr(gpu_settings, 'cuda_plugin_installed', lambda: True)
  assert runtime.apply_gpu_settings(_view(None), environ) == {}
  assert runtime.apply_gpu_settings(_view(8), {'JAX_PLATFORMS': 'cpu'}) == {}
  assert environ == {}
  changes = runtime.apply_gpu_settings(_view(8, local=1, processes=2), environ)
  assert environ == changes and 'NCCL_PROTO' not in environ  # two hosts


# With a CUDA plugin taken as installed and two GPUs in view, the runtime
# sets the GPU environment, then the CPU backend starts under those flags.
_GPU_RUN_ENVIRONMENT = """
import os, jax
from cli import gpu_settings, runtime
gpu_settings.cuda_plugin_installed = lambda: True
runtime.initialize(num_cpu_devices=1, coordinator_address=None, num_processes=1,
                   process_id=0, cpu_xnnpack=False)
jax.devices()
print(os.environ['XLA_FLAGS'])
print(os.environ['XLA_CLIENT_MEM_FRACTION'], os.environ['NCCL_PROTO'])
"""


def _python(code, xla_flags):
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(('NCCL_', 'XLA_CLIENT', 'XLA_PYTHON_CLIENT', 'JAX_PLATFORMS'))}
  env.update(PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES='0,1', XLA_FLAGS=xla_flags)
  return subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                        text=True, timeout=180)


def test_the_environment_a_gpu_run_gets_parses_in_the_pinned_jaxlib():
  result = _python(_GPU_RUN_ENVIRONMENT, '--xla_force_host_platform_device_count=1')
  assert result.returncode == 0, result.stderr[-3000:]
  flags, pool = result.stdout.strip().splitlines()
  assert flags.split() == ['--xla_force_host_platform_device_count=1'] + ALL_FLAGS
  assert pool.split() == ['0.9', 'SIMPLE,LL,LL128']


@pytest.mark.parametrize('flag', ['--xla_gpu_pipeline_all_gather=on'])
def test_a_flag_the_pinned_jaxlib_does_not_know_aborts_the_backend(flag):
  """Why the flags above are checked here: MaxText's newer spelling of the
  pipelining flag is unknown to jaxlib 0.10.2 and would end every process."""
  result = _python('import jax; jax.devices()', flag)
  assert result.returncode != 0
  assert 'Unknown flag' in result.stderr
