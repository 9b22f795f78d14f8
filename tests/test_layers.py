"""Dependencies run one way: main.py -> cli/ -> trainer/ -> models/,
input_pipeline/ -> configs/ (ARCHITECTURE.md). A lower layer that imports a
higher one, or one of two peers that imports the other, fails here."""

import ast
import os

from tests.helpers import REPO

# Highest first; packages on one line are peers and may not import each other.
LAYERS = (
    ('main', 'launch'),
    ('cli',),
    ('trainer',),
    ('models', 'input_pipeline'),
    ('configs',),
)
_RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules(root: str):
  """(importing top-level name, path) of every checked Python file."""
  for name in _RANK:
    path = os.path.join(root, name + '.py')
    if os.path.isfile(path):
      yield name, path
    for folder, _, files in os.walk(os.path.join(root, name)):
      for file_name in files:
        if file_name.endswith('.py'):
          yield name, os.path.join(folder, file_name)


def _imported_top_levels(path: str):
  """Every module a file imports, at any depth (function-level imports too)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name.split('.')[0], node.lineno
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      yield node.module.split('.')[0], node.lineno


def violations(root: str) -> list[str]:
  found = []
  for importer, path in _modules(root):
    for imported, line in _imported_top_levels(path):
      if imported not in _RANK or imported == importer:
        continue
      if _RANK[imported] < _RANK[importer] or (
          _RANK[imported] == _RANK[importer]):
        found.append(f'{os.path.relpath(path, root)}:{line} imports {imported}')
  return found


def test_dependencies_run_one_way():
  assert violations(REPO) == []


def test_a_lower_layer_importing_a_higher_one_is_caught(tmp_path):
  for name, text in (('models/good.py', 'from configs import default\n'),
                     ('trainer/fine.py', 'import models.registry\n'),
                     ('input_pipeline/bad.py', 'def f():\n  from trainer import train\n'),
                     ('models/peer.py', 'from input_pipeline import dataset\n'),
                     ('configs/up.py', 'import cli.config_loader\n')):
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_text(text)
  assert sorted(violations(str(tmp_path))) == [
      'configs/up.py:1 imports cli',
      'input_pipeline/bad.py:2 imports trainer',
      'models/peer.py:1 imports input_pipeline',
  ]
