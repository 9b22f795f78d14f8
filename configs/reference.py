"""Each config key's meaning, read from the comments of configs/default.py.

The schema documents itself: a key's meaning is the comment on its line in
default.py, after the block comment just above it, if any. `--print_config`
and docs/configuration.md (scripts/config_reference.py) both come from here,
so they cannot drift from the schema.
"""

import dataclasses
import inspect
import re

from configs import default as default_config

_ASSIGNMENT = re.compile(r'^\s*config\.([\w.]+)\s*=\s*(.*?)\s*(?:#\s?(.*))?$')
_SECTION = re.compile(r'^\s*#\s*---\s*(.*?)\s*-*\s*$')
_COMMENT = re.compile(r'^\s*#\s?(.*)$')


@dataclasses.dataclass(frozen=True)
class KeyDoc:
  key: str  # dotted name, e.g. 'model.dtype'
  section: str  # the '# --- Model ---' heading it is declared under
  meaning: str


def key_docs() -> list[KeyDoc]:
  """Every leaf key of default.py with its section and meaning, in file order."""
  docs, section, block = [], '', []
  for line in inspect.getsource(default_config).splitlines():
    heading = _SECTION.match(line)
    if heading:
      section, block = heading.group(1), []
      continue
    assignment = _ASSIGNMENT.match(line)
    if assignment:
      key, value, comment = assignment.groups()
      if value.startswith('ml_collections.ConfigDict('):
        block = []  # a sub-tree, not a leaf
        continue
      meaning = ' '.join(block + ([comment] if comment else []))
      docs.append(KeyDoc(key=key, section=section, meaning=meaning.strip()))
      block = []
      continue
    comment = _COMMENT.match(line)
    if comment:
      block.append(comment.group(1).strip())
    elif not line.strip():
      block = []
  return docs
