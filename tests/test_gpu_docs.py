"""docs/gpus.md's published GPU figures are the ones committed, with their
sources, in results/published_gpu/figures.json: row by row, every number
a row shows is in its record."""

import json
import os
import re

from tests.helpers import REPO

DOC = os.path.join(REPO, 'docs', 'gpus.md')
FIGURES = os.path.join(REPO, 'results', 'published_gpu', 'figures.json')


def _expect_table_rows() -> list[str]:
  with open(DOC) as f:
    text = f.read()
  section = text.split('## What to expect on GPUs', 1)[1].split('\n## ', 1)[0]
  rows = [line for line in section.splitlines() if line.startswith('|')]
  return rows[2:]  # after the header and its rule


def test_every_published_figure_in_the_docs_is_in_the_committed_file_with_its_source():
  with open(FIGURES) as f:
    records = json.load(f)['figures']
  rows = _expect_table_rows()
  assert len(rows) == len(records)
  for row, record in zip(rows, records):
    assert record['source'], record
    text = json.dumps(record)
    for number in re.findall(r'\d+(?:\.\d+)?', row):
      assert number in text, (number, row)
