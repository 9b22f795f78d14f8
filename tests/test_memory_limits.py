"""The memory limits a run is checked against before it reads data: the host
memory a CPU process can use (from /proc/meminfo and the cgroup's files),
the compiled step against it, and the host batches' decoded images; and the
bounds on values that cost minutes without a memory limit to catch them
(RandAugment's operations, a ViT's depth)."""

import pytest

from configs import default
from core.errors import UsageError
from input_pipeline import augment_checks
from models import checks as model_checks
from trainer import memory

GIB = memory.GIB
MEMINFO = ('MemTotal:       24000000 kB\n'
           'MemFree:        20000000 kB\n'
           'MemAvailable:   22000000 kB\n')


def test_host_limit_is_what_the_kernel_says_is_available():
  assert memory.host_memory_limit(MEMINFO) == 22000000 * 1024


def test_host_limit_falls_back_to_the_total_without_mem_available():
  assert memory.host_memory_limit('MemTotal:       8000 kB\n') == 8000 * 1024


def test_a_cgroup_v2_limit_below_the_available_memory_wins():
  assert memory.host_memory_limit(MEMINFO, cgroup_v2='4294967296\n') == 4 * GIB


def test_a_cgroup_v2_without_a_limit_leaves_the_available_memory():
  assert memory.host_memory_limit(MEMINFO, cgroup_v2='max\n') == 22000000 * 1024


def test_a_cgroup_v1_limit_below_the_available_memory_wins():
  assert memory.host_memory_limit(MEMINFO, cgroup_v1='2147483648\n') == 2 * GIB


def test_a_cgroup_v1_without_a_limit_leaves_the_available_memory():
  unlimited = '9223372036854771712\n'  # what the kernel writes for none
  assert memory.host_memory_limit(MEMINFO, cgroup_v1=unlimited) == 22000000 * 1024


def test_a_cgroup_limit_above_the_available_memory_does_not_raise_it():
  assert memory.host_memory_limit(MEMINFO, cgroup_v2=f'{64 * GIB}\n') == 22000000 * 1024


def test_no_figure_at_all_gives_no_limit():
  assert memory.host_memory_limit('') is None


def test_this_machine_has_a_host_limit():
  assert memory.read_host_memory_limit() > 0


def _report(peak_temporaries: int) -> memory.MemoryReport:
  return memory.MemoryReport(params=0, opt_state=0, batch_stats=0, arguments=0,
                             outputs=0, aliased=0, temporaries=peak_temporaries)


def test_a_cpu_step_fits_while_its_devices_together_fit_the_host():
  memory.check_fits(_report(5 * GIB), memory.cpu_limit(20 * GIB, 4))


def test_a_cpu_step_is_refused_when_its_devices_together_exceed_the_host():
  # 6 GiB per device fits 20 GiB alone, but not 4 devices' worth of it.
  with pytest.raises(UsageError) as raised:
    memory.check_fits(_report(6 * GIB), memory.cpu_limit(20 * GIB, 4))
  line = str(raised.value)
  assert '\n' not in line
  assert 'does not fit' in line and 'about 6.00 GiB per device' in line
  assert '24.00 GiB for 4 devices' in line and '20.00 GiB of host memory' in line
  assert '4 CPU devices, 5.00 GiB each: 4.00 GiB short' in line
  assert 'data.image_size' in line and 'runtime.num_cpu_devices' in line
  assert 'batch_size' in line and 'model.remat' in line


def test_a_devices_own_memory_is_checked_per_device():
  memory.check_fits(_report(GIB), memory.device_limit(2 * GIB))
  memory.check_fits(_report(GIB), None)
  with pytest.raises(UsageError, match=r'the device has 0\.50 GiB: 0\.50 GiB short \('):
    memory.check_fits(_report(GIB), memory.device_limit(GIB // 2))


def test_host_batches_count_the_process_share_and_the_batches_held():
  # 128 images of 100 x 100 x 3 float32 over 2 processes, 2 prefetched + 2.
  assert memory.host_batches_bytes(128, 100, 2, 2) == 64 * 100 * 100 * 12 * 4
  # A share is rounded up: 3 images over 2 processes is 2 on one of them.
  assert memory.host_batches_bytes(3, 10, 2, 0) == 2 * 10 * 10 * 12 * 2


def _config(**data):
  config = default.get_config()
  config.data.update(data)
  return config


def test_host_batches_that_fit_pass():
  memory.check_host_batches(_config(image_size=224), 1, 16 * GIB)
  memory.check_host_batches(_config(image_size=100000), 1, None)


def test_host_batches_larger_than_the_host_are_refused_naming_the_keys():
  with pytest.raises(UsageError) as raised:
    memory.check_host_batches(_config(image_size=100000), 1, 22 * GIB)
  line = str(raised.value)
  assert '\n' not in line
  assert line.startswith('the host batches do not fit: batch_size=128 of '
                         'data.image_size=100000 px images')
  assert '(data.prefetch_batches=2 + 2) need 57220.46 GiB' in line
  assert '22.00 GiB available' in line


def test_a_larger_eval_batch_is_the_one_counted():
  config = _config(image_size=1000)
  config.eval.batch_size = 1024
  with pytest.raises(UsageError, match=r'eval\.batch_size=1024 '):
    memory.check_host_batches(config, 1, 30 * GIB)
  config.eval.batch_size = 0  # same as batch_size: 128 images fit 30 GiB
  memory.check_host_batches(config, 1, 30 * GIB)


def test_the_randaugment_bound_is_the_number_of_its_operations():
  from input_pipeline import randaugment  # pylint: disable=g-import-not-at-top
  assert augment_checks.RANDAUGMENT_MAX_OPS == len(randaugment.OPS)


@pytest.mark.parametrize('ops', [16, 100])
def test_more_randaugment_operations_than_it_has_are_refused(ops):
  with pytest.raises(UsageError, match=rf'^data\.randaugment_num_ops={ops} must be in \[0, 15\]'):
    augment_checks.check_augmentation(_config(randaugment_num_ops=ops))
  augment_checks.check_augmentation(_config(randaugment_num_ops=15))


@pytest.mark.parametrize('depth', [49, 1000])
def test_a_vit_deeper_than_any_published_is_refused(depth):
  config = default.get_config()
  config.model.name = 'vit_ti16'
  config.model.depth = depth
  with pytest.raises(UsageError, match=rf'^model\.depth={depth} must be at most 48'):
    model_checks.check_config(config)
  config.model.depth = 48
  model_checks.check_config(config)
