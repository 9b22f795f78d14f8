"""Every committed result names the repository's own reproducible command
and, from 2026-12-04 on, a clean commit (results/README.md, "How results are
written").

A record's `command` (benchmarks/provenance.py: the script's argv, its path
relative to the repository) and each command of results/results_index.json
(shell lines, run from the repository root) must run the repository's own
programs: a script of benchmarks/ or scripts/, main.py or launch.py, under
the repository's python, with at most git, mkdir, cp, tar and cd around them
to set up a checkout of one of the repository's own commits. Every path they
name, relative to the directory it is named in, stays inside the repository
and off /tmp. A record dated 2026-12-04 or later must name a clean commit,
not one ending in "-dirty": commit the code, then measure.
"""

import json
import os
import shlex

import pytest

from benchmarks import committed_results
from benchmarks import provenance
from benchmarks import test_suite

REPO = committed_results.REPO
# From this date on, results are measured from a clean commit.
CLEAN_COMMITS_FROM = '2026-12-04'
# Programs besides the repository's own, to set up a checkout of one of its commits.
SETUP_TOOLS = {'git': {'worktree', 'archive'}, 'mkdir': None, 'cp': None, 'tar': None}
PYTHONS = ('python', 'python3')
SCRIPT_DIRS = ('benchmarks', 'scripts')
ENTRY_POINTS = ('main.py', 'launch.py')
# Rows whose command names a path outside the repository: their figures came
# from a run that is not the documented command. Each stays listed until it is
# measured again with the documented command or removed, and the test fails
# when a listed row no longer breaks a rule (then remove it here).
AWAITING_REMEASUREMENT = {}


def _is_repository_script(script: str) -> bool:
  """`script`, as named from the repository root or from a checkout of it, is
  one of the repository's programs."""
  relative = os.path.normpath(script)
  head = relative.split(os.sep)[0]
  if relative not in ENTRY_POINTS and head not in SCRIPT_DIRS:
    return False
  return os.path.isfile(os.path.join(REPO, relative))


def _path_problem(word: str, cwd: str) -> str | None:
  """Why a path named in a command (in `cwd`, relative to the repository) is
  not reproducible, or None."""
  if word.startswith(('/', '~')):
    return f'names {word}, outside the repository'
  resolved = os.path.normpath(os.path.join(REPO, cwd, word))
  if resolved != REPO and not resolved.startswith(REPO + os.sep):
    return f'names {word}, outside the repository'
  return None


def _paths(text: str):
  """The words of `text` that name paths: a flag's value or a word with a
  slash, inside quoted arguments too."""
  for word in text.replace('=', ' ').replace(',', ' ').replace(':', ' ').split():
    if '/' in word or word.startswith('~'):
      yield word


def _argv_problems(argv: list[str], cwd: str, in_shell: bool) -> list[str]:
  """What is wrong with one program's argv (its environment assignments first
  when `in_shell`)."""
  problems = []
  while in_shell and argv and '=' in argv[0] and not argv[0].startswith('-'):
    problems += [p for w in _paths(argv[0].split('=', 1)[1]) if (p := _path_problem(w, cwd))]
    argv = argv[1:]
  if not argv:
    return problems  # an assignment alone: T='ENV:...'
  program, args = argv[0], argv[1:]
  if os.path.basename(program) in PYTHONS:
    if os.path.dirname(program) and (p := _path_problem(program, cwd)):
      problems.append(p)
    if not args or not _is_repository_script(args[0]):
      problems.append(f'runs python {args[0] if args else ""}, not one of the '
                      "repository's scripts")
  elif program in SETUP_TOOLS:
    subcommands = SETUP_TOOLS[program]
    if subcommands is not None and (not args or args[0] not in subcommands):
      problems.append(f'runs {program} {args[0] if args else ""}')
  elif not _is_repository_script(program):
    problems.append(f"runs {program}, not one of the repository's programs")
  for arg in args:
    problems += [p for w in _paths(arg) if (p := _path_problem(w, cwd))]
  return problems


def shell_problems(command: str) -> list[str]:
  """What is wrong with a shell command of results_index.json."""
  lexer = shlex.shlex(command.replace('\\\n', ' '), posix=True, punctuation_chars=';&|')
  lexer.whitespace_split = True
  segments, current = [], []
  for token in lexer:
    if token in ('&&', '||', '|', ';'):
      segments.append(current)
      current = []
    else:
      current.append(token)
  segments.append(current)
  problems, cwd = [], '.'
  for argv in segments:
    if argv and argv[0] == 'cd':
      target = argv[1] if len(argv) > 1 else '~'
      if p := _path_problem(target, cwd):
        problems.append(p)
      else:
        cwd = os.path.normpath(os.path.join(cwd, target))
      continue
    problems += _argv_problems(argv, cwd, in_shell=True)
  return problems


def record_problems(record: dict) -> list[str]:
  """What is wrong with a record's own provenance."""
  problems = _argv_problems(list(record['command']), '.', in_shell=False)
  for name, value in record.get('environment', {}).items():
    problems += [p for w in _paths(value) if (p := _path_problem(w, '.'))]
  date, commit = record.get('date', ''), record.get('commit', '')
  if date[:10] >= CLEAN_COMMITS_FROM and commit.endswith('-dirty'):
    problems.append(f'measured on {date[:10]} from a dirty tree ({commit}): commit the '
                    'code, then measure')
  return problems


def committed_problems(index: dict | None = None,
                       files: list[str] | None = None) -> dict[tuple[str, int | str], list]:
  """(file, line) of each committed record, or (file, 'index run N'), with
  what is wrong with its command."""
  index = committed_results.load_index() if index is None else index
  files = committed_results.results_files() if files is None else files
  found = {}
  for path in files:
    with open(os.path.join(REPO, path)) as f:
      for number, line in enumerate(f, 1):
        record = json.loads(line) if line.strip() else {}
        if 'command' in record and (problems := record_problems(record)):
          found[(path, number)] = problems
  for path, entry in index.items():
    for number, run in enumerate(entry['runs'], 1):
      problems = [p for c in run.get('commands', []) for p in shell_problems(c)]
      if problems:
        found[(path, f'index run {number}')] = problems
  return found


def test_every_committed_command_is_the_repositorys_own():
  found = committed_problems()
  new = {k: v for k, v in found.items() if k not in AWAITING_REMEASUREMENT}
  assert not new, '\n'.join(f'{path}:{where}: {"; ".join(p)}' for (path, where), p in
                            new.items())
  fixed = set(AWAITING_REMEASUREMENT) - set(found)
  assert not fixed, f'no longer breaking a rule, remove from AWAITING_REMEASUREMENT: {fixed}'


def test_every_record_is_read():
  """The check reads the records the tables read: every file, every line."""
  files = committed_results.results_files()
  assert len(files) > 20 and all(f.startswith('results/') for f in files)
  assert committed_results.load_index()


# --- Each rule catches its case ---------------------------------------------

_CLEAN = {'command': ['benchmarks/collectives.py', '--devices=8',
                      '--out=results/speed/collectives.jsonl'],
          'date': '2026-12-04T10:00:00Z', 'commit': 'a' * 40,
          'hardware': {'platform': 'cpu'}, 'environment': {}}


@pytest.mark.parametrize('change, problem', [
    ({'command': ['benchmarks/collectives.py', '--out=/tmp/diag/x.jsonl']},
     'names /tmp/diag/x.jsonl, outside the repository'),
    ({'command': ['benchmarks/link_pacing.py', '--out=../../benchmarks/link_pacing.jsonl']},
     'names ../../benchmarks/link_pacing.jsonl, outside the repository'),
    ({'command': ['diag_probe.py', '--steps=3']},
     "runs diag_probe.py, not one of the repository's programs"),
    ({'command': ['benchmarks/no_such_script.py']},
     "runs benchmarks/no_such_script.py, not one of the repository's programs"),
    ({'environment': {'XLA_FLAGS': '--xla_dump_to=/tmp/dump'}},
     'names /tmp/dump, outside the repository'),
    ({'commit': 'a' * 40 + '-dirty'},
     'measured on 2026-12-04 from a dirty tree'),
])
def test_each_rule_catches_its_case(tmp_path, change, problem):
  assert record_problems(_CLEAN) == []
  bad = {**_CLEAN, **change}
  assert len(record_problems(bad)) == 1 and record_problems(bad)[0].startswith(problem)
  # and the whole check finds it in a results file, by its line
  results = tmp_path / 'results.jsonl'
  results.write_text(json.dumps(_CLEAN) + '\n' + json.dumps(bad) + '\n')
  found = committed_problems(index={}, files=[str(results)])
  assert list(found) == [(str(results), 2)]


def test_a_dirty_commit_before_the_clean_commit_rule_is_kept():
  assert record_problems({**_CLEAN, 'date': '2026-12-03T23:59:59Z',
                          'commit': 'a' * 40 + '-dirty'}) == []


@pytest.mark.parametrize('command, problem', [
    ('.venv/bin/python benchmarks/probe_check.py --out=/tmp/diag/probe_check_new.jsonl',
     'names /tmp/diag/probe_check_new.jsonl'),
    ('python /home/me/diag.py', "runs python /home/me/diag.py, not one of the repository's"),
    ('cd /tmp/diag && ../../.venv/bin/python benchmarks/probe_check.py', 'names /tmp/diag'),
    ('cd runs/before && ../../.venv/bin/python benchmarks/restore_memory.py --dir=../../..',
     'names ../../.., outside the repository'),
    ('curl https://example.com/x | tar -x', 'runs curl'),
    ("XLA_FLAGS=--xla_dump_to=/tmp/x .venv/bin/python main.py --mode=bench",
     'names /tmp/x'),
    (".venv/bin/python benchmarks/speed_ab.py --common='--workdir=/tmp/w'", 'names /tmp/w'),
])
def test_each_shell_rule_catches_its_case(tmp_path, command, problem):
  problems = shell_problems(command)
  assert problems and problems[0].startswith(problem), problems
  index = {'results/speed/x.jsonl': {'runs': [{'commands': [command]}]}}
  assert list(committed_problems(index=index, files=[])) == [
      ('results/speed/x.jsonl', 'index run 1')]


@pytest.mark.parametrize('command', [
    'mkdir -p runs/before && git archive ff996a8 | tar -x -C runs/before',
    'cd runs/before && ../../.venv/bin/python benchmarks/restore_memory.py '
    '--model=vit_b16 --dir=../restore_memory --label=ff996a8',
    'git worktree add BEFORE 2e8735f',
    "T='ENV:GLIBC_TUNABLES=glibc.malloc.hugetlb=1'",
    'XLA_FLAGS=--xla_force_host_platform_device_count=8 .venv/bin/python '
    'benchmarks/memory_table.py --batch_size=64',
    '.venv/bin/python main.py --config=configs/quickstart.py --workdir=NEW_DIR',
])
def test_the_repositorys_own_commands_pass(command):
  assert shell_problems(command) == []


# --- A new measurement -------------------------------------------------------

def test_provenance_warns_loudly_on_a_dirty_tree(monkeypatch, capsys):
  monkeypatch.setattr(provenance, 'hardware', lambda: {'platform': 'cpu'})
  monkeypatch.setattr(provenance, 'commit', lambda: 'abc123-dirty')
  made = provenance.collect(['benchmarks/collectives.py'])
  assert made['commit'] == 'abc123-dirty'
  err = capsys.readouterr().err
  assert 'WARNING: the working tree differs from commit abc123' in err
  assert 'Commit the\ncode, then measure' in err
  monkeypatch.setattr(provenance, 'commit', lambda: 'abc123')
  provenance.collect(['benchmarks/collectives.py'])
  assert capsys.readouterr().err == ''


@pytest.mark.parametrize('line, expected', [
    ('1039 passed, 3 skipped in 654.32s (0:10:54)',
     {'passed': 1039, 'failed': 0, 'skipped': 3, 'errors': 0, 'seconds': 654.32}),
    ('2 failed, 1030 passed, 1 skipped, 4 warnings, 1 error in 700.00s (0:11:40)',
     {'passed': 1030, 'failed': 2, 'skipped': 1, 'errors': 1, 'seconds': 700.0}),
    ('12 passed in 3.21s', {'passed': 12, 'failed': 0, 'skipped': 0, 'errors': 0,
                            'seconds': 3.21}),
])
def test_the_test_suite_script_reads_pytests_last_line(line, expected):
  assert test_suite.parse_summary(line) == expected


def test_the_test_suite_script_refuses_a_line_that_is_no_summary():
  with pytest.raises(ValueError, match='not a pytest summary line'):
    test_suite.parse_summary('ERROR: file or directory not found: tests/nowhere.py')
