"""Specification of cli/device_visibility.py: for every job shape, the GPUs
each process asks JAX to see, from a faked scheduler environment; and a
process that sees fewer accelerators than its job allotted it stops with
exit 2 before any work.

JAX's own SLURM/Open MPI detection would ask for the GPU numbered by the
local rank in every shape: GPU 0 of 8 on every host with one process per
host, and a GPU that does not exist in the view of a process the scheduler
bound to its own GPU.
"""

import os
import subprocess
import sys

import pytest

from cli import device_visibility as dv
from cli import launcher
from core.errors import UsageError
from tests.helpers import REPO, run_main, xla_flags

EIGHT = '0,1,2,3,4,5,6,7'


def _slurm(proc_id, local_id, nodes, tasks_per_node, **extra):
  return {'SLURM_JOB_ID': '77', 'SLURM_STEP_NODELIST': 'node[001-002]',
          'SLURM_PROCID': str(proc_id), 'SLURM_LOCALID': str(local_id),
          'SLURM_NODEID': str(proc_id // tasks_per_node),
          'SLURM_NTASKS': str(nodes * tasks_per_node),
          'SLURM_STEP_TASKS_PER_NODE': f'{tasks_per_node}(x{nodes})', **extra}


def _decide(environ, cluster=None, num_processes=1, process_id=0, loopback=False,
            gpu_dir='/nonexistent'):
  return dv.decide(environ, cluster=cluster, num_processes=num_processes,
                   process_id=process_id, coordinator_loopback=loopback, gpu_dir=gpu_dir)


@pytest.fixture
def eight_gpu_machine(tmp_path):
  """The NVIDIA driver's listing of a machine with 8 GPUs."""
  for i in range(8):
    (tmp_path / f'0000:{i:02x}:00.0').mkdir()
  return str(tmp_path)


@pytest.mark.parametrize('proc_id', [0, 1])
def test_slurm_one_process_per_host_drives_every_gpu_of_its_host(proc_id):
  view = _decide(_slurm(proc_id, 0, nodes=2, tasks_per_node=1,
                        SLURM_GPUS_ON_NODE='8', CUDA_VISIBLE_DEVICES=EIGHT), 'slurm')
  assert view.local_device_ids == tuple(range(8))
  assert view.allotted == 8
  assert view.shape == dv.JobShape('slurm', 0, 1, 2)


@pytest.mark.parametrize('local_id', [0, 5, 7])
def test_slurm_one_process_per_gpu_sharing_the_hosts_view_drives_its_local_rank(local_id):
  """--ntasks-per-node=8 --gpus-per-node=8: every task sees all 8 GPUs."""
  view = _decide(_slurm(8 + local_id, local_id, nodes=2, tasks_per_node=8,
                        SLURM_GPUS_ON_NODE='8', CUDA_VISIBLE_DEVICES=EIGHT), 'slurm')
  assert view.local_device_ids == (local_id,)
  assert view.allotted == 1


@pytest.mark.parametrize('cuda_visible', ['5', '0'])  # without and with cgroup renumbering
def test_slurm_one_process_per_gpu_bound_by_the_scheduler_drives_ordinal_zero(cuda_visible):
  """--gpus-per-task=1: SLURM_LOCALID=5 would name a GPU this task cannot see."""
  view = _decide(_slurm(5, 5, nodes=2, tasks_per_node=8, SLURM_GPUS_PER_TASK='1',
                        SLURM_GPUS_ON_NODE='8', CUDA_VISIBLE_DEVICES=cuda_visible), 'slurm')
  assert view.local_device_ids == (0,)
  assert view.allotted == 1


def test_slurm_binding_known_only_from_cuda_visible_devices_is_kept():
  view = _decide(_slurm(3, 3, nodes=1, tasks_per_node=8, CUDA_VISIBLE_DEVICES='3'), 'slurm')
  assert view.local_device_ids == (0,)
  assert view.allotted == 1


def test_slurm_two_processes_per_host_each_take_half():
  views = [_decide(_slurm(r, r, nodes=1, tasks_per_node=2, SLURM_GPUS_ON_NODE='8',
                          CUDA_VISIBLE_DEVICES=EIGHT), 'slurm') for r in (0, 1)]
  assert [v.local_device_ids for v in views] == [(0, 1, 2, 3), (4, 5, 6, 7)]
  assert [v.allotted for v in views] == [4, 4]


@pytest.mark.parametrize('local_rank', [0, 3])
def test_open_mpi_one_process_per_gpu_without_cuda_visible_devices(local_rank,
                                                                   eight_gpu_machine):
  environ = {'OMPI_COMM_WORLD_LOCAL_RANK': str(local_rank),
             'OMPI_COMM_WORLD_LOCAL_SIZE': '8'}
  view = _decide(environ, 'ompi', gpu_dir=eight_gpu_machine)
  assert view.visible == 8
  assert view.local_device_ids == (local_rank,)


def test_open_mpi_one_process_per_host_drives_every_gpu(eight_gpu_machine):
  environ = {'OMPI_COMM_WORLD_LOCAL_RANK': '0', 'OMPI_COMM_WORLD_LOCAL_SIZE': '1'}
  assert _decide(environ, 'ompi', gpu_dir=eight_gpu_machine).local_device_ids == tuple(range(8))


def test_launch_py_processes_split_the_machines_gpus(eight_gpu_machine):
  views = [_decide({}, None, num_processes=2, process_id=i, loopback=True,
                   gpu_dir=eight_gpu_machine) for i in (0, 1)]
  assert [v.local_device_ids for v in views] == [(0, 1, 2, 3), (4, 5, 6, 7)]
  assert views[0].shape.launcher == 'launch.py'


def test_processes_started_by_hand_on_other_hosts_drive_every_gpu(eight_gpu_machine):
  view = _decide({}, None, num_processes=4, process_id=3, loopback=False,
                 gpu_dir=eight_gpu_machine)
  assert view.local_device_ids == tuple(range(8))


def test_a_single_process_drives_what_cuda_visible_devices_leaves(eight_gpu_machine):
  assert _decide({}, gpu_dir=eight_gpu_machine).local_device_ids == tuple(range(8))
  view = _decide({'CUDA_VISIBLE_DEVICES': '2,3'}, gpu_dir=eight_gpu_machine)
  assert (view.visible, view.local_device_ids, view.allotted) == (2, (0, 1), 2)


def test_a_machine_without_gpus_restricts_nothing():
  view = _decide(_slurm(1, 0, nodes=2, tasks_per_node=1), 'slurm')
  assert view.visible is None and view.local_device_ids == () and view.allotted is None


def test_a_view_that_does_not_split_evenly_is_refused_in_one_line():
  with pytest.raises(UsageError) as e:
    _decide(_slurm(1, 1, nodes=1, tasks_per_node=3, CUDA_VISIBLE_DEVICES=EIGHT), 'slurm')
  assert '8 GPUs in view cannot be shared evenly by the 3 processes' in str(e.value)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('value, count', [
    ('0,1,2', 3), ('', 0), ('-1', 0), ('NoDevFiles', 0), ('0,1,-1,3', 2),
    ('GPU-8f6c1b2e,GPU-0a1b', 2)])
def test_cuda_visible_devices_counts_as_cuda_reads_it(value, count):
  assert dv.cuda_visible_count({'CUDA_VISIBLE_DEVICES': value}) == count


def test_slurm_compressed_task_counts():
  assert [dv.tasks_on_node('2(x3),1', i) for i in range(5)] == [2, 2, 2, 1, None]
  assert dv.tasks_on_node('8', 0) == 8
  assert dv.tasks_on_node('junk', 0) is None


def test_fewer_gpus_seen_than_allotted_is_one_line_naming_both():
  view = dv.choose(dv.JobShape('slurm', 0, 1, 2), 8, 8, 'SLURM_GPUS_ON_NODE=8')
  problem = dv.shortfall(view, platform='gpu', local_devices=4, environ={})
  assert problem == ('this process was allotted 8 GPU(s) (SLURM_GPUS_ON_NODE=8) '
                     'but JAX sees 4')
  assert dv.shortfall(view, platform='gpu', local_devices=8, environ={}) is None
  on_cpu = dv.shortfall(view, platform='cpu', local_devices=8, environ={})
  assert on_cpu.startswith('this process was allotted 8 GPU(s) (SLURM_GPUS_ON_NODE=8) but '
                           'JAX sees 0 (JAX runs on the CPU: install the GPU build')
  # Asked for the CPU on purpose: no complaint.
  assert dv.shortfall(view, platform='cpu', local_devices=8,
                      environ={'JAX_PLATFORMS': 'cpu'}) is None


def test_main_stops_with_exit_2_when_the_job_allotted_gpus_it_cannot_see(tmp_path):
  """On this CPU-only machine JAX sees no GPU, so a job that was given two
  (CUDA_VISIBLE_DEVICES) stops before any work, naming both counts."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  env['CUDA_VISIBLE_DEVICES'] = '0,1'
  result = run_main('--mode=bench', f'--workdir={tmp_path / "w"}', env=env, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines()[-1].startswith(
      'error: this process was allotted 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1) but JAX sees 0')


# Two processes of a faked 2-node SLURM job, one task per node, 8 GPUs each,
# join on this machine; each prints what it asked JAX to see.
_JOIN_AS_SLURM = """
import jax
from cli import runtime
view = runtime.initialize(num_cpu_devices=1, coordinator_address=None, num_processes=1,
                          process_id=0, init_timeout_s=120)
print('visible', jax.config.values['jax_cuda_visible_devices'], 'process', jax.process_index(),
      'of', jax.process_count(), flush=True)
"""


def test_under_slurm_each_host_process_asks_jax_for_all_eight_gpus():
  """What JAX's detection alone asks for here is '0' on both hosts."""
  port = launcher.free_port()
  processes = []
  for i in range(2):
    env = dict(os.environ, XLA_FLAGS=xla_flags(1), PYTHONPATH=REPO,
               JAX_COORDINATOR_PORT=str(port),
               **_slurm(i, 0, nodes=2, tasks_per_node=1, SLURM_GPUS_ON_NODE='8',
                        CUDA_VISIBLE_DEVICES=EIGHT, SLURM_STEP_NODELIST='localhost'))
    processes.append(subprocess.Popen([sys.executable, '-c', _JOIN_AS_SLURM], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
  for i, p in enumerate(processes):
    stdout, stderr = p.communicate(timeout=180)
    assert stdout.split() == ['visible', EIGHT, 'process', str(i), 'of', '2'], stderr[-3000:]
