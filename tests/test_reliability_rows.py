"""docs/reliability.md row by row: every row names tests that exist, and the
claims its tests' own files leave unproved are proved here (an integer key
beyond 64 bits, evaluation classes named, and docs/ps-engine.md's batch norm
under gradient clipping)."""

import os
import re

import jax
import numpy as np
import pytest

from cli import config_loader
from configs import default
from core.errors import UsageError
from input_pipeline import DataError, PairedDataset
from input_pipeline.synthetic import SyntheticDataset
from tests.helpers import REPO
from tests.test_ps_engine import NUM_STEPS, _config, _max_difference, _train

_DOC = os.path.join(REPO, 'docs', 'reliability.md')
_CITED = re.compile(r'`(test_\w+\.py)::(\w+)`')


def _rows() -> list[list[str]]:
  """The cells of the fault table's rows (its header and rule left out)."""
  with open(_DOC, encoding='utf-8') as f:
    lines = [l for l in f.read().splitlines() if l.startswith('| ')]
  return [[c.strip() for c in l.strip('|').split(' | ')] for l in lines[1:]]


def test_every_row_names_tests_that_exist_or_says_it_is_untested():
  rows = _rows()
  assert len(rows) > 50  # the table was read, not some other one
  for fault, _, proof in rows:
    cited = _CITED.findall(proof)
    assert cited or proof.startswith('untested'), f'no test named for: {fault}'
    for file_name, test_name in cited:
      path = os.path.join(REPO, 'tests', file_name)
      assert os.path.exists(path), f'{fault}: {file_name} does not exist'
      with open(path, encoding='utf-8') as f:
        assert re.search(rf'^def {test_name}\(', f.read(), re.MULTILINE), (
            f'{fault}: {file_name} has no test {test_name}')


@pytest.mark.parametrize('key,value', [('num_train_steps', 2**64), ('seed', -2**63 - 1)])
def test_an_integer_beyond_64_bits_is_refused_naming_the_key(key, value):
  with pytest.raises(UsageError) as refused:
    config_loader.apply_overrides(default.get_config(), [(key, str(value))])
  assert str(refused.value) == f'--config.{key}: {key}={value} does not fit in 64 bits'


def test_evaluation_data_with_other_classes_is_refused_naming_them():
  def data(names):
    dataset = SyntheticDataset(num_examples=8, num_classes=len(names), image_size=8,
                               batch_size=8, eval_batch_size=8, seed=0)
    dataset.class_names = list(names)
    return dataset
  with pytest.raises(DataError) as refused:
    PairedDataset(data(['ant', 'bee', 'cat']), data(['ant', 'bee', 'dog']),
                  eval_name='other-set')
  message = str(refused.value)
  assert 'classes only one of them has: cat, dog' in message and '\n' not in message
  with pytest.raises(DataError, match='the same classes in another order'):
    PairedDataset(data(['ant', 'bee']), data(['bee', 'ant']), eval_name='other-set')


def test_synchronous_ps_with_gradient_clipping_keeps_the_batch_norm_of_spmd():
  """docs/ps-engine.md: with clipping, a batch-norm model (not a ViT, which
  has none) gives SPMD's parameters and statistics. 2 workers of 8 examples;
  SPMD normalises over the same groups of 8 (model.bn_group_size). The
  workers are test_ps_engine.py's unclipped ResNet-18 ones (clipping is the
  shards' work), gradients sent from inside backprop (ps.overlap), so their
  program comes from the session's compilation cache."""
  clip = 0.1
  spmd_metrics, spmd = _train(_config('spmd', 'resnet18', **{
      'model.bn_group_size': 8, 'grad_clip_norm': clip}))
  ps_metrics, ps = _train(_config('ps', 'resnet18', **{
      'network.num_workers': 2, 'network.devices_per_host': 2, 'ps.num_shards': 3,
      'ps.overlap': True, 'grad_clip_norm': clip}))
  assert min(m['grad_norm'] for m in spmd_metrics) > clip  # clipping acts at every step
  assert int(ps.step) == NUM_STEPS
  np.testing.assert_allclose([m['loss'] for m in ps_metrics],
                             [m['loss'] for m in spmd_metrics], rtol=1e-5)
  assert _max_difference(ps.params, spmd.params) < 1e-5
  assert _max_difference(ps.batch_stats, spmd.batch_stats) < 1e-5
  assert _max_difference(ps.opt_state, spmd.opt_state) < 1e-4
  # The running means moved from their initial zeros: they were compared.
  means = [x for path, x in jax.tree_util.tree_leaves_with_path(ps.batch_stats)
           if 'mean' in jax.tree_util.keystr(path)]
  assert means and all(np.any(np.asarray(x) != 0) for x in means)
