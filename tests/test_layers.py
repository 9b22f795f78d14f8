"""Dependencies run one way: main.py -> cli/ -> planner/, probe/ -> trainer/
-> models/, input_pipeline/ -> configs/ -> core/ (ARCHITECTURE.md). A lower
layer that imports a higher one, or one of two peers that imports the
other, fails here. Inside trainer/engines/ the same holds one level down:
the emulation floor imports no engine, engines import no other engine, and
code outside an engine imports only what its package exports."""

import ast
import os

from tests.helpers import REPO
from trainer import engines

# Highest first; packages on one line are peers and may not import each other.
LAYERS = (
    ('main', 'launch'),
    ('cli',),
    ('planner', 'probe'),
    ('trainer',),
    ('models', 'input_pipeline'),
    ('configs',),
    ('core',),
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


def _imported_modules(path: str):
  """(dotted name, line) of every module a file imports, at any depth
  (function-level imports too); `from a.b import c` gives a.b.c and a.b."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, node.lineno
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      yield node.module, node.lineno
      for alias in node.names:
        yield f'{node.module}.{alias.name}', node.lineno


def _imported_top_levels(path: str):
  """(top-level package, line) of every import, once each."""
  return sorted({(name.split('.')[0], line) for name, line in _imported_modules(path)},
                key=lambda pair: pair[1])


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


ENGINES_DIR = os.path.join('trainer', 'engines')
# The engines' module names under trainer/engines/, from the registry.
_ENGINES = tuple(module.split('.')[2] for module in engines.REGISTRY.values())
_FLOOR = 'emulation'


def _is_module(root: str, pieces: list[str]) -> bool:
  path = os.path.join(root, *pieces)
  return os.path.isfile(path + '.py') or os.path.isdir(path)


def engine_violations(root: str) -> list[str]:
  """Imports that cross an engine's boundary: the emulation floor importing
  an engine, an engine importing another, or code outside trainer/engines/
  (tests and benchmarks aside, which look inside on purpose) importing a
  module inside an engine or the floor rather than what the package
  exports."""
  found = []
  for importer, path in _modules(root):
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    inside = rel.startswith(ENGINES_DIR + os.sep) and len(parts) > 3
    own = parts[2].removesuffix('.py') if rel.startswith(ENGINES_DIR + os.sep) else None
    reported = set()  # (line): one finding per import statement, its longest name
    for name, line in sorted(_imported_modules(path), key=lambda nl: -len(nl[0])):
      pieces = name.split('.')
      if (pieces[:2] != ['trainer', 'engines'] or len(pieces) < 3 or pieces[2] == own
          or line in reported):
        continue
      reported.add(line)
      target = pieces[2]
      if own == _FLOOR and target in _ENGINES:
        found.append(f'{rel}:{line}: the emulation floor imports {name}')
      elif own in _ENGINES and target in _ENGINES:
        found.append(f'{rel}:{line}: engine {own} imports {name}')
      elif (not inside and own is None and len(pieces) > 3 and
            _is_module(root, pieces)):
        found.append(f'{rel}:{line} imports {name}: use what '
                     f'trainer.engines.{target} exports')
  return found


def test_engines_keep_to_their_packages():
  assert engine_violations(REPO) == []


def test_an_import_across_an_engine_boundary_is_caught(tmp_path):
  for name, text in (
      ('trainer/engines/emulation/wire.py', 'from trainer.engines.ps import state_split\n'),
      ('trainer/engines/allreduce/engine.py', 'from trainer.engines import ps\n'),
      ('trainer/engines/ps/state_split.py', 'from trainer.engines.emulation import wire\n'),
      ('planner/measure.py', 'from trainer.engines import ps\n'
                             'from trainer.engines.ps import state_split\n'),
      ('trainer/train.py', 'from trainer.engines.ps import MODES\n')):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  assert sorted(engine_violations(str(tmp_path))) == [
      'planner/measure.py:2 imports trainer.engines.ps.state_split: use what '
      'trainer.engines.ps exports',
      'trainer/engines/allreduce/engine.py:1: engine allreduce imports trainer.engines.ps',
      'trainer/engines/emulation/wire.py:1: the emulation floor imports '
      'trainer.engines.ps.state_split',
  ]

