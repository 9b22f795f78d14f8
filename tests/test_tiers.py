"""Every test module has exactly one tier (tests/tiers.py), which
tests/conftest.py gives each of its tests as a marker that pyproject.toml
registers."""

import glob
import os
import re

import pytest

from tests import tiers
from tests.helpers import REPO

MODULES = sorted(glob.glob(os.path.join(REPO, 'tests', 'test_*.py')))


def _registered_markers() -> set[str]:
  with open(os.path.join(REPO, 'pyproject.toml')) as f:
    return set(re.findall(r'^\s*"(\w+):', f.read(), re.MULTILINE))


@pytest.mark.parametrize('path', MODULES, ids=[os.path.basename(p) for p in MODULES])
def test_every_test_module_has_exactly_one_tier(path):
  assert tiers.tier_of(path) in tiers.TIERS


def test_the_tiers_are_the_registered_markers_and_each_has_tests():
  assert set(tiers.TIERS) <= _registered_markers()
  assert {tiers.tier_of(p) for p in MODULES} == set(tiers.TIERS)


def test_every_listed_repository_check_is_a_test_module():
  names = {os.path.splitext(os.path.basename(p))[0] for p in MODULES}
  assert tiers.REPO_CHECKS <= names, tiers.REPO_CHECKS - names


def test_this_test_carries_its_tier_alone(request):
  tiers_marked = [m.name for m in request.node.iter_markers() if m.name in tiers.TIERS]
  assert tiers_marked == ['repo']


@pytest.mark.parametrize('source, tier', [
    ('from tests.helpers import run_main\n\ndef test_x():\n  run_main("--list=models")\n', 'e2e'),
    ('from tests.helpers import run_main_many\n\ndef test_x():\n  run_main_many([[]])\n', 'e2e'),
    ("import os\nfrom tests.helpers import REPO\n\ndef test_x():\n"
     "  cmd = [os.path.join(REPO, 'launch.py'), '--processes=2']\n", 'e2e'),
    ("import os\nfrom tests.helpers import REPO\n\ndef test_x():\n"
     "  cmd = [os.path.join(REPO, 'main.py'), '--list=models']\n", 'e2e'),
    ("def test_x():\n  assert ['main.py', '--mode=study'][0] == 'main.py'\n", 'unit'),
    ('def test_x():\n  assert 1 + 1 == 2\n', 'unit'),
])
def test_a_module_tier_follows_what_it_starts(source, tier, tmp_path):
  path = tmp_path / 'test_something.py'
  path.write_text(source)
  assert tiers.tier_of(str(path)) == tier


def test_a_listed_repository_check_is_repo_even_when_it_runs_main(tmp_path):
  path = tmp_path / 'test_doc_commands.py'
  path.write_text('from tests.helpers import run_main\n')
  assert tiers.tier_of(str(path)) == 'repo'
