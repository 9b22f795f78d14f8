"""Which tier a test module belongs to: e2e, repo or unit (one each).

  e2e   starts main.py or launch.py as a process (tests/helpers.py's
        run_main or run_main_many, or the script's path under the
        repository) and checks
        what a user would see: exit codes, output, work dirs.
  repo  reads the repository's own files to hold them true: the docs, the
        pins, the layers, the citations, the committed results. Listed by
        name below; a module listed here is repo even when it also starts
        main.py to check a doc's command.
  unit  everything else: the project's code called in this process.

tests/conftest.py marks every collected test with its module's tier, and
pyproject.toml registers the three markers (`pytest -m unit`, `make
test-unit`).
"""

import os
import re

TIERS = ('unit', 'repo', 'e2e')

REPO_CHECKS = frozenset({
    'test_benchmark_tables',
    'test_doc_citations',
    'test_doc_commands',
    'test_doc_outputs',
    'test_doc_tense',
    'test_gpu_docs',
    'test_install_pins',
    'test_layers',
    'test_published_clusters',
    'test_reliability_rows',
    'test_tiers',
})

# What starts main.py or launch.py: helpers.run_main or run_main_many, or
# the script's path.
_STARTS_MAIN = re.compile(
    r"\brun_main(?:_many)?\(|os\.path\.join\(REPO, '(?:main|launch)\.py'\)")


def tier_of(path: str) -> str:
  """The tier of the test module at `path`."""
  name = os.path.splitext(os.path.basename(path))[0]
  if name in REPO_CHECKS:
    return 'repo'
  with open(path) as f:
    return 'e2e' if _STARTS_MAIN.search(f.read()) else 'unit'
