"""The docs say what is true, not how it came to be: no sentence of README.md,
ARCHITECTURE.md or docs/*.md compares with an earlier state.

How the work went lives in git and in CHANGELOG.md (exempt: it is history).
The phrases below give such a sentence away; each is one that ordinary
present-tense prose of these docs does not need. A phrase with an ordinary
present-tense use is narrowed to exclude it ("no longer fits", "no earlier
than now", "the best of earlier runs counts": a resume chain's runs). A new
phrase goes here when a review finds history that none of these catches.
"""

import glob
import os
import re

import pytest

from tests.helpers import REPO

HISTORY_PHRASES = (
    r'no longer(?! (?:fits?|than)\b)',
    r'used to',
    r'used before(?! (?:the|a|an|its|each|every|any)\b)',
    r'previously',
    r'formerly',
    r'originally',
    r'(?<!than )now',
    r'any ?more',
    r'from the next commit on',
    r'after a first look',
    r'than before',
    r'before (?:this|the) change',
    r'since (?:this|the) change',
    r'(?:an|the|our) earlier run',
    r'earlier runs? at',
    r'from before',
    r'(?:was|were|has been|have been) changed',
    r'(?:was|were) tried',
    r'we tried',
    r'(?:was|were) removed',
    r'(?:was|were) added',
    r'recently',
    r'in the past',
    r'turned out',
    r'(?:was|were) replaced',
    r'(?:this|the last|the next|a later) commit',
)
PATTERN = re.compile(r'\b(?:' + '|'.join(HISTORY_PHRASES) + r')\b', re.IGNORECASE)


def doc_paths() -> list[str]:
  return ['README.md', 'ARCHITECTURE.md'] + sorted(
      os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'docs', '*.md')))


def history_in(text: str) -> list[tuple[int, str]]:
  """(line number, phrase) of each phrase of history in `text`. A sentence
  may wrap, so each line is read with the next one joined on."""
  lines = text.split('\n')
  found = []
  for i, line in enumerate(lines):
    for m in PATTERN.finditer(line):
      found.append((i + 1, m.group(0)))
    if i + 1 < len(lines):  # a phrase split across the line break
      joined = line.rstrip() + ' ' + lines[i + 1].lstrip()
      found += [(i + 1, m.group(0)) for m in PATTERN.finditer(joined)
                if m.start() < len(line.rstrip()) < m.end()]
  return found


@pytest.mark.parametrize('path', doc_paths())
def test_no_doc_sentence_compares_with_an_earlier_state(path):
  with open(os.path.join(REPO, path)) as f:
    found = history_in(f.read())
  assert not found, '\n'.join(f'{path}:{line}: "{phrase}"' for line, phrase in found)


@pytest.mark.parametrize('sentence', [
    'The planner no longer measures T_C itself.',
    'This flag used to default to 8.',
    'The fit, which the planner used before, over-predicted the cells.',
    'Previously the study sampled at the end.',
    'The recipe formerly set 90 epochs.',
    'The step originally took 50 ms.',
    'main.py now restarts itself.',
    'It does not apply any more.',
    'It does not apply anymore.',
    'Rows are recorded from the next commit on.',
    'These choices were made after a first look at the predictions.',
    'The step is 12% faster than before.',
    'Before this change the lock was global.',
    'Since the change, eval takes the EMA.',
    'An earlier run measured 4.8%.',
    'The earlier runs at 3eecbbd and 4a352f7 gave 5%.',
    'Records from before the recipe had batch-norm groups.',
    'The default was changed to 16.',
    'What was tried and did not help.',
    'We tried a second ring.',
    'The option was removed.',
    'The second predictions below were added after the first.',
    'The recipe recently gained a warm-up.',
    'In the past the probe ran on one process.',
    'It turned out that gloo copies each array.',
    'The old table was replaced by a plot.',
    'From this commit on, results record their commit.',
    'The planner no\nlonger measures T_C.',  # wrapped across lines
])
def test_each_phrase_of_history_is_caught(sentence, tmp_path):
  doc = tmp_path / 'page.md'
  doc.write_text(f'# A page\n\nSome true text.\n{sentence}\n')
  assert history_in(doc.read_text()), sentence


@pytest.mark.parametrize('sentence', [
    'Batches stop where the program no longer fits in memory.',
    'Its first chunk starts no earlier than now.',
    'The best of earlier runs counts across a resume.',
    'Old names still load, with a warning naming the new key.',
    'A key that was renamed still loads.',
    'The probe replaces an earlier probe.json atomically.',
    'A lock whose process is gone is taken over.',
    'A key used before the update is read once.',
])
def test_present_tense_prose_passes(sentence):
  assert not history_in(sentence), sentence
