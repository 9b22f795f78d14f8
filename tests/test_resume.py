"""Resuming a run: what may change in its work dir, and what it is told."""

import shutil

import numpy as np
import pytest

from cli import config_loader
from configs import schema
from core.errors import UsageError
from configs import quickstart
from trainer import checkpointing
from trainer import optim
from trainer import run_start


def test_init_keys_may_be_cleared_in_an_existing_workdir(tmp_path):
  # init.* only says how a run starts; once it has checkpoints, a user whose
  # source run is gone may drop it. (Other model keys still must match.)
  saved = quickstart.get_config()
  saved.init.from_workdir, saved.init.reset_head = '/gone/run', True
  schema.save(saved, str(tmp_path))
  recipe = 'configs/quickstart.py'
  config = config_loader.build_config(
      recipe, [('init.from_workdir', ''), ('init.reset_head', 'false')],
      str(tmp_path), recipe)
  assert config.init.from_workdir == '' and not config.init.reset_head
  with pytest.raises(UsageError, match='model.width'):
    config_loader.build_config(recipe, [('init.from_workdir', '/gone/run'),
                                        ('init.reset_head', 'true'),
                                        ('model.width', '8')], str(tmp_path), recipe)


def test_a_longer_run_on_resume_is_warned_of_the_learning_rate_jump():
  config = quickstart.get_config()  # warm-up 1 epoch, then cosine to 0
  old, new = (10, 100), (10, 200)  # (steps per epoch, total steps)
  warning = run_start.schedule_change_warning(config, 60, old, new)
  old_rate = float(optim.create_learning_rate_fn(config, *old)(60))
  new_rate = float(optim.create_learning_rate_fn(config, *new)(60))
  assert new_rate > 2 * old_rate > 0
  assert warning == (
      'the training length changed on resume (100 -> 200 steps), so the '
      'learning-rate schedule is rebuilt over the new length: at step 60 the '
      f'rate jumps from {old_rate:.6g} to {new_rate:.6g}')


def test_an_unchanged_or_flat_schedule_gives_no_warning():
  config = quickstart.get_config()
  assert run_start.schedule_change_warning(config, 60, (10, 100), (10, 100)) is None
  config.lr_schedule = 'constant'  # past the warm-up: the same rate
  assert run_start.schedule_change_warning(config, 60, (10, 100), (10, 200)) is None


def _reopened(workdir):
  return checkpointing.Checkpointer(str(workdir), async_save=False, keep_best=True)


def _save_evaluated(checkpointer, step, accuracy):
  """What training does at an evaluated save: the latest copy, then the best."""
  state, meta = {'w': np.full(2, step, np.float32)}, {'step': step}
  checkpointer.save(step, state, meta)
  checkpointer.save_if_best(step, state, meta, accuracy)


def test_the_best_checkpoint_is_kept_across_a_resume(tmp_path):
  checkpointer = _reopened(tmp_path)
  _save_evaluated(checkpointer, 4, 0.5)
  checkpointer.close()
  # A resumed run knows the best so far: a worse or equal accuracy is not
  # written, a better one replaces it.
  checkpointer = _reopened(tmp_path)
  _save_evaluated(checkpointer, 8, 0.3)
  _save_evaluated(checkpointer, 12, 0.5)
  assert checkpointing.best_steps(str(tmp_path)) == [4]
  _save_evaluated(checkpointer, 16, 0.7)
  checkpointer.close()
  assert checkpointing.best_steps(str(tmp_path)) == [16]


def test_a_run_killed_between_the_best_and_the_latest_copy_resumes(tmp_path):
  checkpointer = _reopened(tmp_path)
  _save_evaluated(checkpointer, 4, 0.5)
  _save_evaluated(checkpointer, 8, 0.6)
  checkpointer.close()
  # The kill: the best copy of step 8 was written, its latest copy was not.
  shutil.rmtree(tmp_path / checkpointing.LATEST_DIR / '8')
  checkpointer = _reopened(tmp_path)
  assert checkpointer.latest_step() == 4
  _save_evaluated(checkpointer, 8, 0.6)  # the rerun reaches step 8 again
  checkpointer.close()
  assert checkpointing.latest_step(str(tmp_path)) == 8
  assert checkpointing.best_steps(str(tmp_path)) == [8]
