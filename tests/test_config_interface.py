"""What a user sees of the config: the reference, --print_config, --list,
--help, and old key names that still load."""

import json
import os
import subprocess
import sys

import pytest

from cli import config_loader
from configs import default
from configs import reference
from configs import schema
from configs import sharding
from core.errors import UsageError
from tests.helpers import REPO, run_main


def test_committed_config_reference_is_up_to_date():
  result = subprocess.run([sys.executable, 'scripts/config_reference.py', '--check'],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, (
      'docs/configuration.md is stale: run python scripts/config_reference.py\n'
      + result.stderr)


def test_every_schema_key_is_documented_once_with_a_meaning():
  docs = reference.key_docs()
  keys = [d.key for d in docs]
  assert sorted(keys) == sorted(schema.dotted_items(default.get_config()))
  assert len(keys) == len(set(keys))
  assert all(d.meaning and d.section for d in docs), [d.key for d in docs if not d.meaning]


def test_old_key_names_in_a_saved_config_load_as_the_new_ones():
  config = schema.conform_to_schema(
      {'plan.batch_sizes': '2,4', 'study.bandwidths_gbps': '1', 'plan.latency_ms': 0.1,
       'eval.checkpoint_step': -1, 'ps.max_staleness': -1, 'ps.num_workers': 2,
       'ps.bandwidth_gbps': 8.0, 'ps.latency_ms': 0.5}, source='config.json')
  assert config.plan.per_worker_batch_sizes == '2,4'
  assert config.study.link_bandwidths_gbps == '1'
  assert config.plan.link_latency_ms == 0.1
  assert config.eval.checkpoint == 'latest'
  assert config.ps.max_staleness == 1
  assert (config.network.num_workers, config.network.bandwidth_gbps,
          config.network.latency_ms) == (2, 8.0, 0.5)
  stepped = schema.conform_to_schema({'eval.checkpoint_step': 40}, source='config.json')
  assert stepped.eval.checkpoint == '40'


def test_old_key_names_on_the_command_line_load_as_the_new_ones():
  config = default.get_config()
  config_loader.apply_overrides(config, [('study.batch_sizes', '48,144'),
                                         ('plan.bandwidth_gbps', '25'),
                                         ('eval.checkpoint_step', '8'),
                                         ('ps.max_staleness', '-1')])
  assert config.study.global_batch_sizes == '48,144'
  assert config.plan.link_bandwidth_gbps == 25.0
  assert config.eval.checkpoint == '8'
  assert config.ps.max_staleness == 1


def test_a_bad_value_under_an_old_name_is_a_usage_error():
  with pytest.raises(UsageError, match='eval.checkpoint_step'):
    schema.conform_to_schema({'eval.checkpoint_step': 'soon'}, source='config.json')


def test_a_sharding_set_named_on_the_command_line_is_that_set_and_saved_as_its_rules(
    tmp_path):
  for name in ('FSDP', 'fsdp', 'DATA_PARALLEL'):
    config = default.get_config()
    config_loader.apply_overrides(config, [('sharding_rules', name)])
    assert config.sharding_rules == sharding.NAMED[name.upper()]
  schema.save(config, str(tmp_path))  # config.json holds the rules, not the name
  assert schema.load_saved(str(tmp_path)).sharding_rules == sharding.DATA_PARALLEL
  rerun = config_loader.build_config(None, [('sharding_rules', 'DATA_PARALLEL')],
                                     str(tmp_path), 'unused.py')
  assert rerun.sharding_rules == sharding.DATA_PARALLEL
  literal = default.get_config()  # the rules themselves still parse
  config_loader.apply_overrides(literal, [('sharding_rules', "(('batch', 'data'),)")])
  assert literal.sharding_rules == (('batch', 'data'),)


def test_an_unknown_sharding_set_name_is_a_usage_error_listing_the_names():
  with pytest.raises(UsageError, match="sharding_rules='ZERO3'") as error:
    config_loader.apply_overrides(default.get_config(), [('sharding_rules', 'ZERO3')])
  assert all(name in str(error.value) for name in sharding.NAMED)


def test_print_config_shows_every_key_resolved_with_its_meaning():
  result = run_main('--config=configs/imagenet_resnet50.py', '--config.batch_size=512',
                    '--config.plan.batch_sizes=4,8', '--print_config', timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  assert 'batch_size = 512' in lines
  assert 'model.name = "resnet50"' in lines  # from the recipe
  assert 'plan.per_worker_batch_sizes = "4,8"' in lines  # an old name, upgraded
  assert 'plan.batch_sizes is now plan.per_worker_batch_sizes' in result.stderr
  meaning = lines[lines.index('batch_size = 512') + 1]
  assert 'global batch' in meaning
  for key in schema.dotted_items(default.get_config()):
    assert any(line.startswith(f'{key} = ') for line in lines), key


def test_print_config_of_a_work_dir_reads_its_saved_config(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'config.json').write_text(json.dumps({'model.name': 'resnet34'}))
  result = run_main(f'--workdir={workdir}', '--print_config', timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'model.name = "resnet34"' in result.stdout.splitlines()
  assert sorted(os.listdir(workdir)) == ['config.json']


def test_list_names_the_models_and_the_recipes():
  models = run_main('--list=models', timeout=120)
  assert models.returncode == 0, models.stderr[-3000:]
  for name in ('resnet50', 'vit_b16', 'alexnet', 'vgg16', 'googlenet'):
    assert name in models.stdout
  recipes = run_main('--list=recipes', timeout=120)
  assert recipes.returncode == 0, recipes.stderr[-3000:]
  listed = [line.split()[0] for line in recipes.stdout.splitlines()]
  assert 'configs/quickstart.py' in listed and 'configs/imagenet_resnet50.py' in listed
  assert not any(p.endswith(('default.py', 'schema.py', 'reference.py', 'atomic.py'))
                 for p in listed)
  assert bad_list_exits_2()


def bad_list_exits_2() -> bool:
  result = run_main('--list=datasets', timeout=120)
  return result.returncode == 2 and 'Traceback' not in result.stderr


def test_help_shows_the_config_flag_and_the_modes():
  result = run_main('--help', timeout=120)
  assert result.returncode == 0
  for fragment in ('--config:', '--config.KEY=VALUE', '--print_config', '--list',
                   '--workdir', '--mode'):
    assert fragment in result.stdout, fragment
