"""Non-finite losses: stop with the last good checkpoint intact, or skip."""

import os

from tests.helpers import run_main
from tests.test_end_to_end import tiny_run_flags
from trainer import metrics_log


def test_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, shapes_dir):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(
      shapes_dir, **{'debug.nan_at_step': 5, 'checkpoint.every_steps': 2,
                     'log_every_steps': 1}))
  assert result.returncode == 1, result.stderr[-3000:]
  error = result.stderr.strip().splitlines()[-1]
  assert 'non-finite at step 6' in error  # the 6th step (step index 5)
  assert 'last good checkpoint: step 4' in error
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']

  # The kept checkpoint is complete: evaluation restores it.
  result = run_main(f'--workdir={workdir}', '--mode=eval')
  assert result.returncode == 0, result.stderr[-3000:]


def test_nonfinite_loss_with_skip_drops_that_update_and_trains_on(tmp_path, shapes_dir):
  workdir = str(tmp_path / 'run')
  result = run_main(f'--workdir={workdir}', *tiny_run_flags(
      shapes_dir, nonfinite='skip', **{'debug.nan_at_step': 5, 'log_every_steps': 1}))
  assert result.returncode == 0, result.stderr[-3000:]
  train = {r['step']: r for r in metrics_log.read(workdir) if r['split'] == 'train'}
  assert train[6]['nonfinite_steps'] == 1
  assert all(train[s]['nonfinite_steps'] == 0 for s in train if s != 6)
  assert isinstance(train[8]['loss'], float)  # finite again after the skip
