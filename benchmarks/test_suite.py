"""The test suite, run as README.md gives it: its counts and its time.

  .venv/bin/python benchmarks/test_suite.py --out=results/test_suite/runs.jsonl
  .venv/bin/python benchmarks/test_suite.py --pytest_args='-q tests/test_layers.py'

Runs `python -m pytest -q -n auto --dist loadfile tests` (or the arguments of
--pytest_args, for trying a part) from the repository root with this
interpreter, passes pytest's output through to standard error, and reads
pytest's last line ("1039 passed, 3 skipped in 654.32s (0:10:54)") into one
record: passed, failed, skipped, errors and the seconds pytest reports, with
the provenance of benchmarks/provenance.py. The record is written even when
tests fail; the script exits with pytest's status.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import provenance

# README.md's test command, after `python -m pytest`.
SUITE_ARGS = '-q -n auto --dist loadfile tests'
_COUNT = re.compile(r'(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b')
_SECONDS = re.compile(r'\bin (\d+(?:\.\d+)?)s\b')


def parse_summary(line: str) -> dict:
  """pytest's last line as counts and seconds; ValueError when it is no summary."""
  seconds = _SECONDS.search(line)
  if not seconds:
    raise ValueError(f'not a pytest summary line: {line!r}')
  counts = {'passed': 0, 'failed': 0, 'skipped': 0, 'errors': 0}
  for number, kind in _COUNT.findall(line):
    key = 'errors' if kind.startswith('error') else kind
    counts[key] = counts.get(key, 0) + int(number)
  return {**counts, 'seconds': float(seconds.group(1))}


def run_pytest(pytest_args: list[str]) -> tuple[int, str]:
  """(pytest's exit status, its last non-empty line), its output passed to stderr."""
  command = [sys.executable, '-m', 'pytest', *pytest_args]
  last = ''
  with subprocess.Popen(command, cwd=provenance.REPO, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True) as process:
    for line in process.stdout:
      sys.stderr.write(line)
      if line.strip():
        last = line.strip()
  return process.returncode, last


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--pytest_args', default=SUITE_ARGS,
                      help=f'the arguments after `python -m pytest` (default: {SUITE_ARGS!r})')
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  pytest_args = shlex.split(args.pytest_args)
  returncode, last = run_pytest(pytest_args)
  results.write({'pytest_args': pytest_args, 'returncode': returncode,
                 'summary': last, **parse_summary(last)})
  sys.exit(returncode)


if __name__ == '__main__':
  main()
