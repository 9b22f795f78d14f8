"""docs/reliability.md row by row: every row names tests that exist, and the
claims its tests' own files leave unproved are proved here (an integer key
beyond 64 bits, evaluation classes named)."""

import os
import re

import pytest

from cli import config_loader
from configs import default
from core.errors import UsageError
from input_pipeline import DataError, PairedDataset
from input_pipeline.synthetic import SyntheticDataset
from tests.helpers import REPO

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
