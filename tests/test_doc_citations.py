"""Every figure in README.md, ARCHITECTURE.md, CHANGELOG.md and docs/*.md
that cites a results file is in that file.

The citation convention (results/README.md, "Citing a result"): a figure
names its results file by its repository path in backticks,
`results/....jsonl` (or .json, or a table generated from them, .md),
optionally narrowed to lines (`results/x.jsonl`, lines 1-4). A result
removed from the repository is cited where git keeps it,
`git show COMMIT:PATH`, and read from there. The path
covers the paragraph or list item it stands in, or the table row; in a
table's caption (the paragraph just above the table) it covers the whole
table. Every figure there is checked: a number with a decimal point, a
percentage, or a number with a unit of time, size, speed or a ratio (s, ms,
min, GiB, MB, images/s, GFLOP/s, x, ...), its own or its table column's
(`step (ms)`). Counts and settings (batch 32, 8 devices, 224 px), dates,
the machine (24 GiB, no GPU) and anything in `code` are not figures.

A figure is found when some number v in the cited records, rounded to the
printed precision, reads as printed: as v itself, as 100 v for a
percentage of a fraction, in the printed unit for seconds and bytes (0.111 s
as 111 ms, 1.2e9 bytes as 1.2 GB), or, for a ratio (1.19x), as the quotient
of two values of one field. `python tests/test_doc_citations.py [COPY]`
lists every figure not found, in this checkout or in a copy of it.
"""

import functools
import glob
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CITATION = re.compile(
    r'`((?:git show [0-9a-f]{7,40}:)?(?:results|benchmarks)/[\w./-]+\.(?:jsonl|json|md))`'
    r'(?:,? (?:lines?|records?) (\d+(?:-\d+)?(?:(?:, | and )\d+(?:-\d+)?)*))?')
# A number not glued to a word (ResNet-18, N_w, 7e62d6f, v2), with its unit.
NUMBER = re.compile(
    r'(?<![\w.\-/=+])(?<!\w-)(-?\d{1,3}(?:,\d{3})+|-?\d+(?:\.\d+)?)'
    r'(?:-(\d+(?:\.\d+)?))?'  # a range: 0.56-0.58
    r'(?![\w.]*[=])'
    r'\s?(%|x(?![\w])|ms\b|s\b|min\b|GiB\b|MiB\b|GB\b|MB\b|KiB\b|kB\b|'
    r'images/s\b|GFLOP/s\b|TFLOP/s\b|h\b)?')
# A table column's unit, in its header: "step (ms)".
HEADER_UNIT = re.compile(r'\((%|ms|s|min|GiB|MiB|GB|MB|images/s|GFLOP/s)\)')
# The machine a figure was measured on is no figure: "2-core CPU, 24 GiB, no GPU".
HARDWARE = re.compile(r'\b\d+(?:\.\d+)? GiB(?=,\s+no\s+GPU)')
DATE = re.compile(r'\b\d{4}-\d{2}-\d{2}\b')
CODE = re.compile(r'`[^`]*`')
LINK = re.compile(r'\]\([^)]*\)')
UNIT_SCALES = {  # printed unit -> factors from a recorded value
    '%': (1, 100),  # (1: a field named *percent*, or a table's text)
    'ms': (1, 1e3),
    's': (1, 1e-3),
    'min': (1, 1 / 60),
    'h': (1, 1 / 3600),
    'GiB': (1, 2**-30),
    'MiB': (1, 2**-20, 1024),
    'KiB': (1, 2**-10),
    'GB': (1, 1e-9),
    'MB': (1, 1e-6),
    'kB': (1, 1e-3),
    'GFLOP/s': (1, 1e-9, 1e3),
    'TFLOP/s': (1, 1e-12),
}


def doc_paths(repo: str = REPO) -> list[str]:
  return ['README.md', 'ARCHITECTURE.md', 'CHANGELOG.md'] + sorted(
      os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, 'docs', '*.md')))


# --- The documents: blocks, their citations and their figures ---------------

def blocks(text: str):
  """(first line number, lines, caption, header) of each paragraph, list
  item and table row, outside code blocks and headings. A row's caption is
  the paragraph just above its table when that ends with a colon, and its
  header the table's first row (None for text)."""
  out, current, start, fenced = [], [], 0, False
  last_paragraph, caption, header = None, None, None

  def flush():
    nonlocal current, last_paragraph
    if current:
      out.append((start, current, None, None))
      last_paragraph = current
    current = []

  for i, line in enumerate(text.split('\n'), 1):
    stripped = line.strip()
    if stripped.startswith('```'):
      flush()
      fenced, last_paragraph = not fenced, None
      continue
    if fenced:
      continue
    if stripped.startswith('|'):
      flush()
      if header is None:
        header = cells(line)
        caption = (last_paragraph if last_paragraph
                   and last_paragraph[-1].rstrip().endswith(':') else None)
      if not set(stripped) <= set('|-: '):  # not the header's rule
        out.append((i, [line], caption, header))
      continue
    header = None
    if not stripped or stripped.startswith('#'):
      flush()
      if stripped:
        last_paragraph = None
      continue
    if re.match(r'([-*]|\d+\.) ', line):  # a list item starts
      flush()
    if not current:
      start = i
    current.append(line)
  flush()
  return out


def cells(row: str) -> list[str]:
  return [c.strip() for c in row.strip().strip('|').split('|')]


def citations(text: str) -> list[tuple[str, list[int] | None]]:
  found = []
  for m in CITATION.finditer(text):
    lines = None
    if m.group(2):
      lines = []
      for part in re.split(r', | and ', m.group(2)):
        a, _, b = part.partition('-')
        lines.extend(range(int(a), int(b or a) + 1))
    found.append((m.group(1), lines))
  return found


def figures(text: str, column_unit: str = '') -> list[tuple[str, int, str]]:
  """(printed number, decimals, unit) of each figure in `text`; a number
  without a unit of its own takes `column_unit` (a table header's)."""
  prose = LINK.sub(']', CODE.sub(' ', HARDWARE.sub(' ', DATE.sub(' ', text))))
  found = []
  for m in NUMBER.finditer(prose):
    first, second, unit = m.group(1), m.group(2), m.group(3) or column_unit
    for printed in filter(None, (first, second)):
      decimals = len(printed.partition('.')[2])
      if decimals or unit:
        found.append((printed, decimals, unit))
  return found


def row_figures(row: str, header: list[str]) -> list[tuple[str, int, str]]:
  """The figures of a table row, each cell with its column's unit."""
  found = []
  for i, cell in enumerate(cells(row)):
    unit = HEADER_UNIT.search(header[i]) if i < len(header) else None
    found += figures(cell, unit.group(1) if unit else '')
  return found


# --- The results files: their numbers -----------------------------------------

def _leaves(value, key=''):
  if isinstance(value, bool):
    return
  if isinstance(value, (int, float)):
    yield key, float(value)
  elif isinstance(value, dict):
    for k, v in value.items():
      yield from _leaves(v, k)
  elif isinstance(value, list):
    for v in value:
      yield from _leaves(v, key)
  elif isinstance(value, str):
    for number in re.findall(r'(?<![\w.])-?\d+(?:\.\d+)?(?![\w])', value):
      yield key, float(number)


GIT_SHOW = re.compile(r'git show ([0-9a-f]{7,40}):(.+)')


def read_cited(repo: str, path: str) -> str | None:
  """The text of a cited file, from the checkout or, for `git show C:P`, from
  git's history; None when it is in neither."""
  in_history = GIT_SHOW.fullmatch(path)
  if not in_history:
    full = os.path.join(repo, path)
    if not os.path.isfile(full):
      return None
    with open(full) as f:
      return f.read()
  result = subprocess.run(['git', 'show', f'{in_history[1]}:{in_history[2]}'], cwd=repo,
                          capture_output=True, text=True, check=False)
  return result.stdout if result.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def recorded(repo: str, path: str, lines: tuple[int, ...] | None) -> dict[str, list[float]]:
  """field -> its numbers in the cited records of `path`."""
  text = read_cited(repo, path)
  if path.endswith('.jsonl'):
    numbered = [(n, json.loads(l)) for n, l in enumerate(text.split('\n'), 1) if l.strip()]
    values = [v for n, v in numbered if lines is None or n in lines]
  elif path.endswith('.json'):
    values = [json.loads(text)]
  else:  # a generated table: its numbers
    values = [text]
  fields = {}
  for key, number in _leaves(values):
    fields.setdefault(key, []).append(number)
  return fields


def _reads_as(value: float, printed: str, decimals: int) -> bool:
  target = float(printed.replace(',', ''))
  return abs(abs(value) - abs(target)) <= 0.5 * 10**-decimals * (1 + 1e-9) + 1e-12


def found(printed: str, decimals: int, unit: str,
          fields: dict[str, list[float]]) -> bool:
  for key, values in fields.items():
    scales = UNIT_SCALES.get(unit, (1,))
    if unit == '%' and 'percent' not in key and key:
      scales = (100,)  # a fraction; percentages are recorded as *_percent or in text
    for v in values:
      if any(_reads_as(v * s, printed, decimals) for s in scales):
        return True
  if unit == 'x':
    for values in fields.values():
      for a in values:
        for b in values:
          if b and _reads_as(a / b, printed, decimals):
            return True
  return False


def check_text(text: str, label: str, repo: str = REPO) -> tuple[list[str], int]:
  """(failures, figures checked) of one document's text."""
  failures, checked = [], 0
  for line_no, lines, caption, header in blocks(text):
    body = '\n'.join(lines)
    cited = citations(body) + (citations('\n'.join(caption)) if caption else [])
    if not cited:
      continue
    missing = [c for c, _ in cited if read_cited(repo, c) is None]
    if missing:
      failures.append(f'{label}:{line_no}: cites {missing[0]}, which does not exist')
      continue
    fields = {}
    for cited_path, cited_lines in cited:
      lines_key = tuple(cited_lines) if cited_lines else None
      for key, values in recorded(repo, cited_path, lines_key).items():
        fields.setdefault(key, []).extend(values)
    for printed, decimals, unit in (row_figures(body, header) if header else figures(body)):
      checked += 1
      if not found(printed, decimals, unit, fields):
        names = ', '.join(sorted({c for c, _ in cited}))
        failures.append(f'{label}:{line_no}: {printed}{(" " + unit) if unit else ""} '
                        f'is not in {names}')
  return failures, checked


def check_docs(repo: str = REPO) -> tuple[list[str], int]:
  failures, checked = [], 0
  for path in doc_paths(repo):
    with open(os.path.join(repo, path)) as f:
      doc_failures, doc_checked = check_text(f.read(), path, repo)
    failures += doc_failures
    checked += doc_checked
  return failures, checked


def test_every_cited_figure_is_in_the_results_file_it_cites():
  failures, checked = check_docs()
  assert checked > 300  # the convention is in use: figures are being read
  assert not failures, '\n'.join(failures)


_TABLE = """\
On the train step (`results/speed/malloc_tunables.jsonl`):

| | glibc's defaults | with the tunables | ratio |
|---|---|---|---|
| 2 devices | 44.4 images/s | **54.1** | 1.22x |
| 8 devices | 19.8 | **25.5** | 1.29x |

8 devices take 1.65 s per step, 1.23 s with the tunables, MFU 12-14%
(`results/speed/malloc_tunables.jsonl`).

A paragraph that cites nothing is not read: 99.9 images/s.
"""


@pytest.mark.parametrize('printed, changed', [
    ('44.4 images/s', '44.6 images/s'),  # a table cell
    ('1.29x', '1.31x'),  # a ratio
    ('1.23 s', '1.32 s'),  # prose
    ('12-14%', '12-15%'),  # a percentage of a recorded fraction
])
def test_a_changed_figure_is_reported_and_the_true_one_is_not(printed, changed):
  assert check_text(_TABLE, 'doc') == ([], 10)
  failures, _ = check_text(_TABLE.replace(printed, changed), 'doc')
  assert len(failures) == 1 and changed.split()[0].split('-')[-1].rstrip('%x') in failures[0]


def test_a_citation_of_a_file_that_does_not_exist_is_reported():
  failures, _ = check_text('Fast: 1.5 s (`results/speed/nowhere.jsonl`).', 'doc')
  assert failures == ['doc:1: cites results/speed/nowhere.jsonl, which does not exist']
  # A results path that is not under results/ is read too, and reported.
  failures, _ = check_text('Fast: 1.5 s (`benchmarks/speed/shard_update.jsonl`).', 'doc')
  assert failures == ['doc:1: cites benchmarks/speed/shard_update.jsonl, which does not exist']


# A removed result, cited where git keeps it (the commit before it was removed).
_IN_HISTORY = ('oneDNN: 4.94 against 4.83 images/s '
               '(`git show 10a1d54:benchmarks/speed/xla_cpu_flags_224px.jsonl`).')


def test_a_figure_cited_from_git_history_is_read_from_there():
  assert check_text(_IN_HISTORY, 'doc') == ([], 2)
  failures, _ = check_text(_IN_HISTORY.replace('4.94', '4.97'), 'doc')
  assert failures == ['doc:1: 4.97 is not in '
                      'git show 10a1d54:benchmarks/speed/xla_cpu_flags_224px.jsonl']
  failures, _ = check_text(_IN_HISTORY.replace('10a1d54', '0000000'), 'doc')
  assert failures == ['doc:1: cites git show 0000000:benchmarks/speed/xla_cpu_flags_224px.jsonl,'
                      ' which does not exist']


if __name__ == '__main__':
  # python tests/test_doc_citations.py [REPO]: every figure that is not in its
  # file, for this checkout or another copy of it.
  problems, total = check_docs(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else REPO)
  print('\n'.join(problems))
  print(f'{total} figures checked, {len(problems)} not found', file=sys.stderr)
  sys.exit(1 if problems else 0)
