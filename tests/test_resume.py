"""Resuming a run: what may change in its work dir, and what it is told."""

import pytest

from cli import config_loader
from configs import schema
from configs.errors import UsageError
from configs import quickstart
from trainer import optim
from trainer import train


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
  warning = train.schedule_change_warning(config, 60, old, new)
  old_rate = float(optim.create_learning_rate_fn(config, *old)(60))
  new_rate = float(optim.create_learning_rate_fn(config, *new)(60))
  assert new_rate > 2 * old_rate > 0
  assert warning == (
      'the training length changed on resume (100 -> 200 steps), so the '
      'learning-rate schedule is rebuilt over the new length: at step 60 the '
      f'rate jumps from {old_rate:.6g} to {new_rate:.6g}')


def test_an_unchanged_or_flat_schedule_gives_no_warning():
  config = quickstart.get_config()
  assert train.schedule_change_warning(config, 60, (10, 100), (10, 100)) is None
  config.lr_schedule = 'constant'  # past the warm-up: the same rate
  assert train.schedule_change_warning(config, 60, (10, 100), (10, 200)) is None
