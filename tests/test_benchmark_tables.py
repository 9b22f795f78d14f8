"""results/: committed tables and plots regenerate from the committed data,
every result has its provenance; benchmarks/: every script writes results
only when given --out. No benchmark runs here: the scripts are read, not run (their
--help at most)."""

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from benchmarks import committed_results
from benchmarks import make_plots
from benchmarks import provenance
from benchmarks import tables

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, 'benchmarks')
RESULTS = os.path.join(REPO, 'results')
# Tools that regenerate the committed tables and plots: they write no results.
_TOOLS = {'make_tables.py', 'make_plots.py'}


def _scripts() -> list[str]:
  """benchmarks/*.py that run as programs, the table and plot tools aside."""
  scripts = []
  for path in sorted(glob.glob(os.path.join(BENCHMARKS, '*.py'))):
    with open(path) as f:
      source = f.read()
    if "if __name__ == '__main__'" in source and os.path.basename(path) not in _TOOLS:
      scripts.append(path)
  return scripts


def _run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                        check=False)


def test_committed_tables_equal_what_the_committed_data_gives(tmp_path):
  result = _run('benchmarks/make_tables.py', f'--out_dir={tmp_path}')
  assert result.returncode == 0, result.stderr
  fresh_tables = sorted(os.path.relpath(p, tmp_path) for p in
                        glob.glob(str(tmp_path / '**' / '*.md'), recursive=True))
  # One table beside each results file, and no other markdown under results/
  # than those and the folder's README.
  assert fresh_tables == sorted(os.path.splitext(p)[0] + '.md'
                                for p in committed_results.results_files())
  committed = sorted(os.path.relpath(p, REPO) for p in
                     glob.glob(os.path.join(RESULTS, '**', '*.md'), recursive=True))
  assert committed == sorted(fresh_tables + ['results/README.md']), (
      'a table is missing or has no results file: run python benchmarks/make_tables.py')
  for name in fresh_tables:
    with open(tmp_path / name) as f:
      fresh = f.read()
    with open(os.path.join(REPO, name)) as f:
      assert f.read() == fresh, f'{name} is stale: run python benchmarks/make_tables.py'
  for name in fresh_tables:  # each a short page
    with open(tmp_path / name) as f:
      assert len(f.read().splitlines()) <= 150, name


def test_every_committed_png_is_drawn_again_from_the_committed_data(tmp_path):
  committed = sorted(os.path.relpath(p, REPO) for p in
                     glob.glob(os.path.join(RESULTS, '**', '*.png'), recursive=True))
  drawn = sorted(png for pngs in make_plots.FIGURES.values() for png in pngs)
  assert committed == drawn, 'a committed PNG without a recipe in make_plots.FIGURES'
  result = _run('benchmarks/make_plots.py', f'--out_dir={tmp_path}')
  assert result.returncode == 0, result.stderr
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for png in drawn:
    with Image.open(tmp_path / png) as fresh, Image.open(os.path.join(REPO, png)) as old:
      assert fresh.size == old.size, png


def test_every_committed_record_has_its_provenance():
  index = committed_results.load_index()
  assert set(index) <= set(committed_results.results_files())
  for path in committed_results.results_files():
    kind, runs = committed_results.load(path, index)
    assert kind in tables.TABLES, (path, kind)
    assert runs, path
    for run in runs:
      assert run.commands or run.command_not_recorded, (path, run.lines)
      assert run.date and run.commit and run.hardware, (path, run.lines)


def test_a_record_without_provenance_and_no_index_entry_is_refused(tmp_path):
  path = tmp_path / 'stray.jsonl'
  path.write_text(json.dumps({'images_per_sec': 1.0}) + '\n')
  with pytest.raises(ValueError, match='without command, date, commit'):
    committed_results.load(str(path), index={})


def test_records_with_their_own_provenance_group_into_runs(tmp_path):
  made = [{'command': ['benchmarks/collectives.py', '--devices=2'], 'date': 'D1',
           'commit': 'c', 'hardware': {'platform': 'cpu', 'num_devices': 1}},
          {'command': ['benchmarks/collectives.py', '--devices=8'], 'date': 'D2',
           'commit': 'c', 'hardware': {'platform': 'cpu', 'num_devices': 1}}]
  lines = [{'operation': op, **made[i]} for i, op in ((0, 'psum'), (0, 'elementwise'),
                                                     (1, 'psum'))]
  path = tmp_path / 'results.jsonl'
  path.write_text(''.join(json.dumps(r) + '\n' for r in lines))
  kind, runs = committed_results.load(str(path), index={})
  assert kind == 'collectives'
  assert [run.lines for run in runs] == [[1, 2], [3]]
  assert runs[1].commands == ['python benchmarks/collectives.py --devices=8']


def _calls(tree: ast.AST):
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
      yield node


@pytest.mark.parametrize('script', _scripts(), ids=os.path.basename)
def test_benchmark_script_writes_results_only_to_out(script):
  with open(script) as f:
    tree = ast.parse(f.read())
  calls = list(_calls(tree))
  absl_out = [c for c in calls if c.func.attr == 'DEFINE_string' and c.args and
              isinstance(c.args[0], ast.Constant) and c.args[0].value == 'out']
  argparse_out = [c for c in calls if c.func.attr == 'add_out_argument']
  assert absl_out or argparse_out, f'{script}: no --out'
  for call in absl_out:  # without --out nothing is written
    assert isinstance(call.args[1], ast.Constant) and call.args[1].value == ''
  assert any(c.func.attr == 'Results' for c in calls), f'{script}: records not via Results'
  with open(os.path.join(BENCHMARKS, 'README.md')) as f:
    assert f'`{os.path.basename(script)}`' in f.read()


@pytest.mark.parametrize('script', ['benchmarks/speed_ab.py', 'benchmarks/engine_contrast.py'])
def test_help_of_absl_and_argparse_scripts_shows_out(script):
  result = _run(script, '--help')
  assert '--out' in result.stdout + result.stderr
  assert 'Also append the JSON lines' in ' '.join((result.stdout + result.stderr).split())


def test_results_append_records_with_provenance_only_when_given_out(tmp_path, capsys,
                                                                    monkeypatch):
  made = provenance.collect(['benchmarks/collectives.py', '--devices=2'])
  head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True,
                        text=True, check=True).stdout.strip()
  assert made['command'] == ['benchmarks/collectives.py', '--devices=2']
  assert made['commit'].removesuffix('-dirty') == head
  assert made['hardware']['platform'] == 'cpu'
  assert made['hardware']['cpu_count'] == os.cpu_count()

  monkeypatch.chdir(tmp_path)
  provenance.Results(provenance=made).write({'median_s': 0.5})
  assert os.listdir(tmp_path) == []
  printed = json.loads(capsys.readouterr().out)
  assert printed == {'median_s': 0.5, **made}

  out = tmp_path / 'results.jsonl'
  out.write_text('{"old": 1}')  # a last line without its newline stays whole
  results = provenance.Results(str(out), provenance=made)
  results.write({'median_s': 0.5, 'date': 'overridden'})
  results.write({'median_s': 0.25})
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert lines == [{'old': 1}, {'median_s': 0.5, **made}, {'median_s': 0.25, **made}]


def test_out_that_cannot_take_results_exits_2(tmp_path, capsys):
  for bad in (str(tmp_path), str(tmp_path / 'missing' / 'results.jsonl')):
    with pytest.raises(SystemExit) as exit_info:
      provenance.Results(bad, provenance={})
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f'error: --out={bad}: ')


def test_commit_is_marked_dirty_when_tracked_files_differ(tmp_path):
  def git(*args):
    return subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *args],
                          cwd=tmp_path, capture_output=True, text=True, check=True).stdout
  git('init', '-q')
  (tmp_path / 'a.txt').write_text('1')
  git('add', 'a.txt')
  git('commit', '-q', '-m', 'a')
  head = git('rev-parse', 'HEAD').strip()
  (tmp_path / 'untracked.txt').write_text('not part of the commit')
  assert provenance.commit(str(tmp_path)) == head
  (tmp_path / 'a.txt').write_text('2')
  assert provenance.commit(str(tmp_path)) == head + '-dirty'
  assert provenance.commit(str(tmp_path / 'no_repo_here')) == 'unknown'


def test_repeated_probe_checks_give_each_cells_spread_over_the_repeats():
  cell = {'processes': 2, 'model': 'm', 'per_device_batch': 8,
          'measured_step_s_intervals': [1.0]}
  records = [{**cell, 'repeat': i, 'predicted_step_s': p, 'measured_step_s': m,
              'error': p / m - 1}
             for i, (p, m) in enumerate([(1.0, 0.8), (1.1, 1.0), (1.2, 1.2)])]
  (header, rows), (spread_header, spreads) = tables.probe_check(records)
  assert header[0] == 'repeat' and [r[0] for r in rows] == ['0', '1', '2']
  got = dict(zip(spread_header, spreads[0]))
  # (1200 - 1000) / 1100 and (1200 - 800) / 1000.
  assert got['predicted spread'] == '18.2%' and got['measured spread'] == '40.0%'
  assert got['predicted ms'] == '1000.0 to 1200.0' and got['repeats'] == '3'
  assert got['errors'] == '+25.0%, +10.0%, +0.0%'
  # Without repeats: the cells alone, as before.
  assert len(tables.probe_check([{k: v for k, v in r.items() if k != 'repeat'}
                                 for r in records])) == 1
