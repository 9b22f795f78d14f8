"""Every block of README.md and docs/*.md that shows what a command prints is
produced here, by running the command or by rendering the committed file it
came from, and compared with what the doc shows.

A fenced block is a command block when each of its lines (backslash
continuations joined) is blank, a `#` comment, a shell variable assignment,
a `--flag` fragment, or a command: optional NAME=value assignments, then
a program of `.venv/bin/`, `python...`, `make`, `sbatch`, or a script of
`scripts/` or `benchmarks/`. A
block with a language tag (```python) is code. Every other block shows
output, and the last non-blank line before its opening fence names its
producer:

    <!-- output: tests/test_doc_outputs.py::test_NAME -->
    <!-- output: tests/test_doc_outputs.py::test_NAME from results/FILE.json -->

test_NAME is a test of this module that produces the block and compares
it: it runs the command the doc gives (in a scratch work dir, cheap
commands only), or, with `from FILE`, renders that committed file as the
command prints it (a command too long to run here, whose run wrote FILE).
What varies between runs is masked on both sides by `mask()`: the host's
name and the scratch work dir. Everything else compares exactly.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import REPO

PRODUCER_MODULE = 'tests/test_doc_outputs.py'
MARKER = re.compile(
    r'^<!-- output: ' + re.escape(PRODUCER_MODULE) + r'::(\w+)(?: from (\S+))? -->$')
_ASSIGNMENTS = r'''(?:[A-Za-z_]\w*=(?:'[^']*'|"[^"]*"|\S)*\s*)*'''
_COMMAND_LINE = re.compile(
    r'^' + _ASSIGNMENTS + r'(?:$|(?:\.venv/bin/\S+|python[\d.]*|make|sbatch|(?:scripts|benchmarks)/\S+|--\S+)\b)')


def doc_paths() -> list[str]:
  return ['README.md'] + sorted(
      os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'docs', '*.md')))


class Block:
  """A fenced block: where it is, its tag, its lines, the marker above it."""

  def __init__(self, path, line, tag, lines, marker):
    self.path, self.line, self.tag, self.lines, self.marker = path, line, tag, lines, marker

  @property
  def where(self) -> str:
    return f'{self.path}:{self.line}'

  def shows_output(self) -> bool:
    if self.tag:
      return False
    joined, continued = [], False
    for line in self.lines:
      if continued:
        joined[-1] += ' ' + line.strip()
      else:
        joined.append(line.strip())
      continued = line.rstrip().endswith('\\')
    return not all(not text or text.startswith('#') or _COMMAND_LINE.match(text)
                   for text in joined)


def blocks_of(path: str, text: str) -> list[Block]:
  lines = text.split('\n')
  found, i = [], 0
  while i < len(lines):
    if lines[i].strip().startswith('```'):
      start, tag = i, lines[i].strip()[3:].strip()
      i += 1
      while i < len(lines) and not lines[i].strip().startswith('```'):
        i += 1
      before = [l.strip() for l in lines[:start] if l.strip()]
      marker = MARKER.match(before[-1]) if before else None
      found.append(Block(path, start + 1, tag, lines[start + 1:i], marker))
    i += 1
  return found


def doc_blocks() -> list[Block]:
  found = []
  for path in doc_paths():
    with open(os.path.join(REPO, path)) as f:
      found += blocks_of(path, f.read())
  return found


BLOCKS = doc_blocks()
OUTPUT_BLOCKS = [b for b in BLOCKS if b.shows_output()]


def marked_block(producer: str) -> Block:
  """The one output block whose marker names `producer`."""
  marked = [b for b in OUTPUT_BLOCKS if b.marker and b.marker.group(1) == producer]
  assert len(marked) == 1, f'{producer}: marks {len(marked)} output blocks, not 1'
  return marked[0]


def mask(text: str, workdirs: dict[str, str] | None = None) -> str:
  """What varies between runs, the same on both sides: the host's name
  (`on HOST (`), and each scratch work dir written as the doc's."""
  for scratch, doc in (workdirs or {}).items():
    text = text.replace(scratch, doc)
  return re.sub(r'\bon \S+ \(', 'on HOST (', text)


# The checks of the convention.

@pytest.mark.parametrize('block', OUTPUT_BLOCKS, ids=[b.where for b in OUTPUT_BLOCKS])
def test_every_output_block_names_its_producer(block):
  assert block.marker, (f'{block.where} shows output but names no producer: put '
                        f'<!-- output: {PRODUCER_MODULE}::test_NAME --> above it')
  producer, source = block.marker.groups()
  assert producer.startswith('test_') and callable(globals().get(producer)), \
      f'{block.where}: {producer} is not a test of {PRODUCER_MODULE}'
  assert source is None or os.path.isfile(os.path.join(REPO, source)), \
      f'{block.where}: {source} is not a committed file'


def test_every_marker_sits_above_an_output_block():
  marked_commands = [b.where for b in BLOCKS if b.marker and not b.shows_output()]
  assert not marked_commands, f'markers above blocks that show no output: {marked_commands}'
  for path in doc_paths():
    with open(os.path.join(REPO, path)) as f:
      markers = sum(bool(MARKER.match(l.strip())) for l in f)
    assert markers == sum(1 for b in BLOCKS if b.path == path and b.marker), \
        f'{path}: a marker that is not just above a block'


@pytest.mark.parametrize('text, shows_output', [
    ('.venv/bin/python main.py --workdir=DIR \\\n    --config.batch_size=8', False),
    ('XLA_FLAGS=--xla_x=1 .venv/bin/python benchmarks/a.py \\\n  --out=x.jsonl', False),
    ("T='ENV:A=1'\n.venv/bin/python b.py --variant=\"x: $T\"", False),
    ('# a comment\nmake quickstart   # install, then train', False),
    ('--config.mesh.data=-1   # data parallel', False),
    ('sbatch --nodes=4 scripts/slurm_train.sbatch --config=c.py', False),
    ('process 1 of 2 on vm (launch.py, local rank 1 of 2): 2 cpu device(s)', True),
    ('.venv/bin/python main.py --list=models\nquickstart  ResNet-18 on shapes', True),
    ('[p0] probe: 2 process(es)', True),
])
def test_a_block_shows_output_unless_every_line_is_a_command(text, shows_output):
  [block] = blocks_of('doc.md', f'Text.\n\n```\n{text}\n```\n')
  assert block.shows_output() == shows_output


def test_an_output_block_without_a_marker_fails_and_one_with_a_marker_passes():
  unmarked = blocks_of('doc.md', 'It prints:\n\n```\nresnet18 at 32 px\n```\n')
  assert unmarked[0].shows_output() and unmarked[0].marker is None
  marked = blocks_of('doc.md', (f'It prints:\n\n<!-- output: {PRODUCER_MODULE}::'
                                'test_x from results/a.json -->\n```\nresnet18\n```\n'))
  assert marked[0].marker.groups() == ('test_x', 'results/a.json')


# The producers: one per output block, each named by its block's marker.

def _launch(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, os.path.join(REPO, 'launch.py'), *args],
                        cwd=REPO, text=True, capture_output=True, timeout=timeout)


def _committed_probe(tmp_path) -> str:
  """A probe dir holding the committed probe.json of docs/probe.md's run
  (the file its summary block's marker names)."""
  probe_dir = tmp_path / 'probe'
  probe_dir.mkdir()
  source = marked_block('test_probe_summary_under_launch_py').marker.group(2)
  shutil.copy(os.path.join(REPO, source), probe_dir / 'probe.json')
  return str(probe_dir)


def test_start_up_line_of_a_process_under_launch_py(tmp_path):
  # Any mode that starts the runtime logs the line; a plan from a probe is
  # the cheapest such run (about 5 s of CPU, nothing measured).
  block = marked_block('test_start_up_line_of_a_process_under_launch_py')
  result = _launch(['--processes=2', '--devices=2', '--', '--config=configs/quickstart.py',
                    f'--workdir={tmp_path / "run"}', '--mode=plan',
                    f'--config.plan.probe={_committed_probe(tmp_path)}'])
  assert result.returncode == 0, result.stderr[-3000:]
  printed = re.findall(r'^\[p\d\] .*?\] (process \d+ of \d+ on .*)$',
                       result.stdout + result.stderr, re.MULTILINE)
  assert len(printed) == 2, printed
  shown = [mask(line.strip()) for line in block.lines if line.strip()]
  assert shown and set(shown) <= {mask(line) for line in printed}, (shown, printed)


def _main_arguments(command: list[str]) -> list[str]:
  """A recorded main.py command less what launch.py adds to each process."""
  added = ('--coordinator_address=', '--num_processes=', '--process_id=')
  return [a for a in command[1:] if not a.startswith(added)]


def test_probe_summary_under_launch_py():
  # 66 s of measuring on 2 processes: too long here. The block is the
  # summary the run printed, rendered again from the probe.json it wrote.
  from probe import report  # pylint: disable=g-import-not-at-top
  block = marked_block('test_probe_summary_under_launch_py')
  with open(os.path.join(REPO, block.marker.group(2))) as f:
    record = json.load(f)
  # The command block just above shows the run that wrote the file.
  command_block = BLOCKS[BLOCKS.index(block) - 1]
  shown_command = ' '.join(l.strip().rstrip('\\') for l in command_block.lines).split()
  assert shown_command[shown_command.index('--') + 1:] == \
      _main_arguments(record['provenance']['command']), command_block.where
  workdir = next(a.partition('=')[2] for a in shown_command if a.startswith('--workdir='))
  summary = report.summary(record, os.path.join(workdir, 'probe.json'))
  # launch.py prefixes each line of process 0 with [p0].
  assert block.lines == [f'[p0] {line}' for line in summary.split('\n')]


def test_plan_of_resnet50_on_64_devices():
  # About a minute of compiling on 2 cores: too long here. The block is what
  # benchmarks/plan_example.py's run of the page's command printed, and the
  # planner prints it again from the plan.json that run wrote.
  from planner import plan  # pylint: disable=g-import-not-at-top
  block = marked_block('test_plan_of_resnet50_on_64_devices')
  with open(os.path.join(REPO, block.marker.group(2))) as f:
    record = [json.loads(line) for line in f if line.strip()][-1]
  assert plan.printed_text(record['plan']) == record['printed']
  assert block.lines == record['printed'].split('\n')
  # The page's first command shows the run's arguments, with a work dir.
  command_block = next(b for b in BLOCKS if b.path == block.path and not b.shows_output())
  shown = ' '.join(l.strip().rstrip('\\') for l in command_block.lines).split()
  assert [a for a in shown if a.startswith('--') and not a.startswith('--workdir=')] == \
      record['main_args'], command_block.where

