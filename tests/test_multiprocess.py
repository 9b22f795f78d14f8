"""Two processes joined by jax.distributed on 127.0.0.1 train exactly as one
process with the same devices: each reads its own share of every batch."""

import socket

import numpy as np

from tests.helpers import run_main
from tests.test_end_to_end import tiny_run_flags
from trainer import metrics_log


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def test_two_processes_give_the_losses_and_eval_of_one(tmp_path, shapes_dir):
  flags = tiny_run_flags(shapes_dir, num_train_steps=4, log_every_steps=1,
                         eval_every_steps=4, **{'checkpoint.every_steps': 4})
  single = str(tmp_path / 'single')
  result = run_main(f'--workdir={single}', *flags)
  assert result.returncode == 0, result.stderr[-3000:]

  multi = str(tmp_path / 'multi')
  address = f'127.0.0.1:{_free_port()}'
  processes = [
      run_main(f'--workdir={multi}', *flags, f'--coordinator_address={address}',
               '--num_processes=2', f'--process_id={i}', background=True,
               env={'XLA_FLAGS': '--xla_force_host_platform_device_count=4'})
      for i in range(2)]
  for process in processes:
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]

  def records(workdir):
    return [(r['step'], r['split']) for r in metrics_log.read(workdir)]
  def losses(workdir):
    return [r['loss'] for r in metrics_log.read(workdir)]
  assert records(multi) == records(single)
  # Equal up to the summation order of the cross-process all-reduce (gloo).
  np.testing.assert_allclose(losses(multi), losses(single), rtol=1e-5)
  evals = [r for r in metrics_log.read(multi) if r['split'] == 'eval']
  assert evals[-1]['num_examples'] == 600
