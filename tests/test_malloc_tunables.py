"""Which malloc setting main.py runs a command line under (cli/runtime.py,
cli/modes.py)."""

import pytest

from cli import modes
from cli import runtime


@pytest.mark.parametrize('argv,mode', [
    (['main.py', '--mode=study', '--workdir=w'], 'study'),
    (['main.py', '--workdir=w', '--mode', 'study'], 'study'),
    (['main.py', '--mode=train', '--mode=study'], 'study'),  # the last wins
    (['main.py', '--mode=study', '--mode=bench'], 'bench'),
    (['main.py', '--workdir=w'], None),
    (['main.py', '--mode'], None),  # no value: absl's error, not ours
    (['main.py', '--config.study.steps=2', '--model=study'], None),
])
def test_the_mode_is_read_from_the_command_line(argv, mode):
  assert runtime.command_line_mode(argv) == mode


def test_only_the_study_runs_on_glibcs_defaults():
  assert modes.on_glibc_malloc_defaults('study')
  for name in (None, 'train', 'plan', 'bench', 'probe', 'no-such-mode'):
    assert not modes.on_glibc_malloc_defaults(name)
  assert [n for n, m in modes.MODES.items() if m.glibc_malloc_defaults] == ['study']
