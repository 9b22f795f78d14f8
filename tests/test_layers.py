"""Dependencies run one way, and no module imports itself through others.

The layers, highest first (packages on one line are peers):

  main.py, launch.py    the programs: flags, then one call into cli/
  cli/                  flags, config loading, the runtime, the modes' table,
                        the list of config checks (validation.py)
  planner/, probe/,     the cluster planner and study; the probe of the real
  modes/                network; the modes other than train (eval, predict,
                        export, bench)
  trainer/              the training loop, its engines, checkpoints, evaluation
  models/,              the models; the host input; run infrastructure (the
  input_pipeline/,      work dir's lock, the processes' agreement, preemption)
  coordination/
  configs/              recipes, the schema, accepted values and parsers
  core/                 errors, exit codes, atomic writes, units, timing

A lower layer that imports a higher one, or one of two peers that imports
the other, fails here. Inside trainer/engines/ the same holds one level
down: the emulation floor imports no engine, engines import no other
engine, and code outside an engine imports only what its package exports.
And no import cycle among the project's modules, counting imports inside
functions (the engines' registry, which imports by name through importlib,
has no import statement to count).
"""

import ast
import os

from tests.helpers import REPO
from trainer import engines

# Highest first; packages on one line are peers and may not import each other.
LAYERS = (
    ('main', 'launch'),
    ('cli',),
    ('planner', 'probe', 'modes'),
    ('trainer',),
    ('models', 'input_pipeline', 'coordination'),
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



def _module_files(root: str) -> dict[str, str]:
  """{dotted module name: path} of every checked Python file (a package by
  its own name, for its __init__.py)."""
  found = {}
  for _, path in _modules(root):
    parts = os.path.relpath(path, root)[:-len('.py')].split(os.sep)
    if parts[-1] == '__init__':
      parts = parts[:-1]
    found['.'.join(parts)] = path
  return found


def import_graph(root: str) -> dict[str, set[str]]:
  """{module: the project's modules it imports, at any depth}. `from a import
  b` names module a.b when there is one, else a; an import of a name
  inside a module that is not one counts as its nearest enclosing module."""
  files = _module_files(root)
  graph = {module: set() for module in files}
  for module, path in files.items():
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [f'{node.module}.{alias.name}' for alias in node.names]
      else:
        continue
      for name in names:
        while name and name not in files:
          name = name.rpartition('.')[0]
        if name and name != module:
          graph[module].add(name)
  return graph


def cycles(root: str) -> list[str]:
  """One cycle ('a -> b -> a') for each group of modules that import each
  other, directly or through others."""
  graph = import_graph(root)
  found = []
  for group in _strongly_connected(graph):
    if len(group) > 1:
      found.append(' -> '.join(_cycle_through(graph, group)))
  return sorted(found)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
  """Tarjan's strongly connected components, without recursion."""
  index, low, on_stack, stack, groups = {}, {}, set(), [], []
  for start in sorted(graph):
    if start in index:
      continue
    work = [(start, iter(sorted(graph[start])))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, edges = work[-1]
      for nxt in edges:
        if nxt not in index:
          index[nxt] = low[nxt] = len(index)
          stack.append(nxt)
          on_stack.add(nxt)
          work.append((nxt, iter(sorted(graph[nxt]))))
          break
        if nxt in on_stack:
          low[node] = min(low[node], index[nxt])
      else:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          group = set()
          while True:
            member = stack.pop()
            on_stack.discard(member)
            group.add(member)
            if member == node:
              break
          groups.append(group)
  return groups


def _cycle_through(graph: dict[str, set[str]], group: set[str]) -> list[str]:
  """A path from the group's first module back to itself, inside the group
  (breadth first: the shortest)."""
  start = min(group)
  came_from = {}
  frontier = [start]
  while frontier:
    following = []
    for node in frontier:
      for nxt in sorted(graph[node] & group):
        if nxt == start:
          path = [node]  # back from node to start, then turned round
          while path[-1] != start:
            path.append(came_from[path[-1]])
          return path[::-1] + [start]
        if nxt not in came_from:
          came_from[nxt] = node
          following.append(nxt)
    frontier = following
  raise AssertionError(f'no cycle through {sorted(group)}')


def test_no_module_imports_itself_through_others():
  assert cycles(REPO) == []


def test_a_cycle_through_a_function_level_import_is_caught(tmp_path):
  for name, text in (
      ('trainer/__init__.py', ''),
      ('trainer/a.py', 'from trainer import b\n'),
      ('trainer/b.py', 'def f():\n  from trainer import c\n'),
      ('trainer/c.py', 'import trainer.a\n'),
      ('trainer/d.py', 'from trainer import a\n'),  # imports the cycle, is not in it
      ('configs/e.py', 'from configs import f\n'),
      ('configs/f.py', 'from configs.e import something\n')):
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_text(text)
  assert cycles(str(tmp_path)) == [
      'configs.e -> configs.f -> configs.e',
      'trainer.a -> trainer.b -> trainer.c -> trainer.a',
  ]
