"""The committed results: each JSON lines file under results/, split into
the runs that made it, each run with its provenance.

A record written by a script carries its own provenance
(benchmarks/provenance.py): consecutive records with the same command, date
and commit are one run. Records committed without it get theirs from
results/results_index.json, by line range (`lines`: first and last) or
by line numbers (`line_numbers`). A line with neither is an error: every committed figure names its command, date, commit and hardware.
"""

import dataclasses
import glob
import json
import os
import shlex

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = 'results'  # the folder of committed results, in the repository
INDEX = 'results/results_index.json'


@dataclasses.dataclass
class Run:
  """Records of one results file made by one command."""
  lines: list[int]  # 1-based line numbers in the file
  commands: list[str]  # shell lines; empty when not recorded
  command_not_recorded: str  # what the records show instead
  date: str
  commit: str
  commit_label: str  # 'commit', or 'commit that added the data' for indexed runs
  hardware: str
  note: str
  records: list[dict]

  def caption(self) -> str:
    """Command, date, commit and hardware, as a figure states them."""
    command = (' ; '.join(c.replace('\\\n', '') for c in self.commands)
               or f'not recorded: {self.command_not_recorded}')
    return (f'command: {" ".join(command.split())}\ndate: {self.date}; '
            f'{self.commit_label}: {self.commit[:12]}; hardware: {self.hardware}')

  def describe_lines(self) -> str:
    first, last = self.lines[0], self.lines[-1]
    if len(self.lines) == 1:
      return f'line {first}'
    if self.lines == list(range(first, last + 1)):
      return f'lines {first}-{last}'
    return 'lines ' + ', '.join(map(str, self.lines))


def results_files() -> list[str]:
  """Every committed results file, as a path relative to the repository."""
  paths = glob.glob(os.path.join(REPO, RESULTS, '**', '*.jsonl'), recursive=True)
  return sorted(os.path.relpath(p, REPO) for p in paths)


def load_index() -> dict:
  with open(os.path.join(REPO, INDEX)) as f:
    return json.load(f)['files']


def _records(path: str) -> list[dict]:
  with open(os.path.join(REPO, path)) as f:
    return [json.loads(line) for line in f if line.strip()]


def describe_hardware(hardware: dict) -> str:
  """One line from a record's `hardware` (benchmarks/provenance.py)."""
  memory = hardware.get('memory_gib')
  return (f"{hardware.get('platform')} ({hardware.get('device_kind')}) x "
          f"{hardware.get('num_devices')}; {hardware.get('cpu_count')} CPU cores "
          f"({hardware.get('cpu_model')})" + (f', {memory:g} GiB' if memory else ''))


def _command_line(record: dict) -> str:
  env = ' '.join(f'{k}={shlex.quote(v)}' for k, v in record.get('environment', {}).items())
  return ' '.join(filter(None, [env, 'python', shlex.join(record['command'])]))


def _own_runs(numbered: list[tuple[int, dict]]) -> list[Run]:
  """Runs of records that carry their provenance: consecutive ones alike."""
  runs = []
  for number, record in numbered:
    key = (record['command'], record['date'], record['commit'])
    last = runs[-1] if runs else None
    if last and last.lines[-1] == number - 1 and (
        last.records[-1]['command'], last.date, last.commit) == key:
      last.lines.append(number)
      last.records.append(record)
      continue
    runs.append(Run([number], [_command_line(record)], '', record['date'],
                    record['commit'], 'commit', describe_hardware(record['hardware']),
                    '', [record]))
  return runs


def load(path: str, index: dict | None = None) -> tuple[str, list[Run]]:
  """(the kind of table its records make, its runs in file order) of a results file."""
  index = load_index() if index is None else index
  records = _records(path)
  entry = index.get(path, {'runs': []})
  runs, covered = [], set()
  for run in entry['runs']:
    if 'lines' in run:
      first, last = run['lines']
      numbers = list(range(first, last + 1))
    else:
      numbers = sorted(run['line_numbers'])
    if not numbers or not 1 <= numbers[0] <= numbers[-1] <= len(records) or (
        covered & set(numbers)):
      raise ValueError(f'{INDEX}: {path}: lines {numbers} overlap another run or pass '
                       f'the end of the file ({len(records)} lines)')
    covered |= set(numbers)
    # `commit_measured`: the clean checkout a run measured, for a writer
    # that records no provenance itself (main.py --mode=study).
    measured = 'commit_measured' in run
    runs.append(Run(numbers, run.get('commands', []), run.get('command_not_recorded', ''),
                    run['date'], run['commit_measured' if measured else
                                     'commit_that_added_the_data'],
                    'commit' if measured else 'commit that added the data',
                    run['hardware'], run.get('note', ''),
                    [records[n - 1] for n in numbers]))
  own = [(n, r) for n, r in enumerate(records, 1) if n not in covered]
  for number, record in own:
    if not all(k in record for k in ('command', 'date', 'commit', 'hardware')):
      raise ValueError(f'{path}:{number}: a record without command, date, commit and '
                       f'hardware, and no run of {INDEX} covers it')
  own_runs = _own_runs(own)
  # The kind of table: what the index says, else the script that wrote them.
  kinds = {entry['table']} if 'table' in entry else set()
  kinds |= {os.path.splitext(os.path.basename(run.records[0]['command'][0]))[0]
            for run in own_runs}
  if len(kinds) != 1:
    raise ValueError(f'{path}: ' + (f'records of {sorted(kinds)} in one file; give each '
                                    'script its own --out file' if kinds else 'no records'))
  return kinds.pop(), sorted(runs + own_runs, key=lambda run: run.lines[0])
