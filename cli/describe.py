"""--print_config and --list: what a user can set and choose, without a run.

Nothing here starts the runtime or writes anything.
"""

import ast
import json
import os

from configs import reference
from configs.schema import dotted_items

RECIPES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           'configs')


def config_text(config) -> str:
  """Every key of `config`: `key = value` and its meaning, by section."""
  values = dotted_items(config)
  lines, section = [], None
  for doc in reference.key_docs():
    if doc.section != section:
      section = doc.section
      lines.append(f'\n# {section}')
    lines.append(f'{doc.key} = {json.dumps(values[doc.key])}')
    lines.append(f'    {doc.meaning}')
  return '\n'.join(lines).lstrip('\n')


def recipes() -> list[tuple[str, str]]:
  """(path, first line of its docstring) of each recipe in configs/."""
  found = []
  for name in sorted(os.listdir(RECIPES_DIR)):
    # A recipe is a module with a get_config(); default.py is the schema.
    if not name.endswith('.py') or name == 'default.py':
      continue
    with open(os.path.join(RECIPES_DIR, name)) as f:
      module = ast.parse(f.read())
    if not any(isinstance(node, ast.FunctionDef) and node.name == 'get_config'
               for node in module.body):
      continue
    docstring = ast.get_docstring(module) or ''
    found.append((os.path.join('configs', name), docstring.split('\n')[0]))
  return found


def recipes_text() -> str:
  listed = recipes()
  width = max((len(path) for path, _ in listed), default=0)
  return '\n'.join(f'{path:{width}s}  {summary}' for path, summary in listed)


def models_text() -> str:
  """The registry's model names by family, as `--config.model.name` takes them."""
  from models import registry  # pylint: disable=g-import-not-at-top
  families: dict[str, list[str]] = {}
  for name in registry.MODEL_NAMES:
    family = ('ViT' if registry.is_vit(name) else 'ResNet' if name.startswith('resnet')
              else 'VGG' if name.startswith('vgg') else name)
    families.setdefault(family, []).append(name)
  return '\n'.join(f'{family:10s} {", ".join(names)}' for family, names in families.items())
