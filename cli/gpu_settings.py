"""XLA, allocator and NCCL settings for a run on GPUs, as the anchors set them.

Applied by cli/runtime.py before the backend starts, only when this process
will run on GPUs (a CUDA plugin is installed and a GPU is in view), and
never over the user's own: a flag already in XLA_FLAGS, or a variable
already set, wins. Each setting names its source; docs/gpus.md gives the
sources' words. Every flag here parses in the pinned jaxlib (an unknown
flag in XLA_FLAGS aborts the process), which tests/test_gpu_settings.py
checks on the CPU; what each does to a GPU step only a GPU shows.
"""

import importlib.util

# (flag, value, source). The latency-hiding scheduler lets XLA start
# collectives early and overlap them with compute; the pipelined
# collectives move an FSDP all-gather or reduce-scatter, and the data
# parallel all-reduce, across loop iterations; the combine thresholds merge
# the many small gradient all-reduces of a convolutional net into few large
# ones (MaxText's single-host values).
XLA_GPU_FLAGS = (
    ('--xla_gpu_enable_latency_hiding_scheduler', 'true',
     'JAX GPU performance tips; MaxText; JAX-Toolbox'),
    ('--xla_gpu_enable_pipelined_all_gather', 'true', 'MaxText; JAX-Toolbox'),
    ('--xla_gpu_enable_pipelined_reduce_scatter', 'true', 'MaxText; JAX-Toolbox'),
    ('--xla_gpu_enable_pipelined_all_reduce', 'true', 'MaxText; JAX-Toolbox'),
    ('--xla_gpu_all_reduce_combine_threshold_bytes', '134217728', 'MaxText'),
    ('--xla_gpu_all_gather_combine_threshold_bytes', '134217728', 'MaxText'),
    ('--xla_gpu_reduce_scatter_combine_threshold_bytes', '67108864', 'MaxText'),
)

# JAX preallocates 75% of each GPU's memory; the other 25% is more than
# cuDNN's workspace, NCCL's buffers and the CUDA context need, and is
# batch size lost. JAX-Toolbox: "We typically set it to 0.9 or 0.8." jaxlib
# reads either name and refuses both at once, so neither set means ours.
MEMORY_FRACTION = ('XLA_CLIENT_MEM_FRACTION', '0.9', 'JAX-Toolbox GPU performance guide')
MEMORY_FRACTION_NAMES = ('XLA_CLIENT_MEM_FRACTION', 'XLA_PYTHON_CLIENT_MEM_FRACTION')


def budget_gib(capacity_gb: float, mem_fraction: float, margin: float) -> float:
  """What a step's peak may reach on a GPU of capacity_gb (10^9 bytes), in
  GiB: the allocator's pool (mem_fraction of the GPU) less `margin` of it."""
  return capacity_gb * 10**9 * mem_fraction * (1 - margin) / 2**30

# The JAX GPU performance tips: these "could improve single-host
# communication speed" and "don't seem useful for multi-host communication
# yet"; so only a job whose processes share one host gets them.
SINGLE_HOST_NCCL = (
    ('NCCL_LL128_BUFFSIZE', '-2', 'JAX GPU performance tips'),
    ('NCCL_LL_BUFFSIZE', '-2', 'JAX GPU performance tips'),
    ('NCCL_PROTO', 'SIMPLE,LL,LL128', 'JAX GPU performance tips'),
)

CUDA_PLUGINS = ('jax_plugins.xla_cuda12', 'jax_plugins.xla_cuda13')


def cuda_plugin_installed() -> bool:
  """Whether jax finds a CUDA plugin (the pinned GPU installs add one)."""
  for name in CUDA_PLUGINS:
    try:
      if importlib.util.find_spec(name) is not None:
        return True
    except ModuleNotFoundError:
      pass
  return False


def _flag_names(xla_flags: str) -> set:
  return {f.split('=', 1)[0] for f in xla_flags.split()}


def gpu_environment(environ, *, single_host: bool) -> dict:
  """The variables to set for a GPU run: each setting the environment does
  not already make. Pure: returns the changes, touches nothing."""
  changes = {}
  xla_flags = environ.get('XLA_FLAGS', '')
  given = _flag_names(xla_flags)
  added = [f'{flag}={value}' for flag, value, _ in XLA_GPU_FLAGS if flag not in given]
  if added:
    changes['XLA_FLAGS'] = ' '.join([xla_flags.strip()] + added).strip()
  if not any(name in environ for name in MEMORY_FRACTION_NAMES):
    changes[MEMORY_FRACTION[0]] = MEMORY_FRACTION[1]
  if single_host:
    changes.update({name: value for name, value, _ in SINGLE_HOST_NCCL
                    if name not in environ})
  return changes
