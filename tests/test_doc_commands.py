"""Every main.py and launch.py command that README.md or docs/*.md shows parses.

A command is a line of a code block (with its backslash continuations) that
runs `main.py`, `launch.py` or `scripts/slurm_train.sbatch`, or an inline
`.venv/bin/python ...` span. Each is checked without running it, by the
project's own parsing: every flag is one main.py defines (cli/flags_parser.py)
and its value parses (--mode, --list), --workdir is there when the mode needs
one, the recipe exists, and the config it builds with every --config.KEY=VALUE
(cli/config_loader.py) passes validation (cli/validation.py), and a
train, bench or eval command fits the devices of the 2-core CPU machine the
docs measure on (one per core, or runtime.num_cpu_devices; launch.py's
processes x --devices): its mesh, batch and emulated workers.
launch.py's own options are its parser's, and main.py's arguments follow
`--`.

A command on a work dir that an earlier command of the docs trained
(README.md first, then docs/ in order) starts from that run's config, as
main.py starts from its config.json: `--workdir=runs/r50 --mode=eval` is
checked against the ImageNet recipe that trained runs/r50, and a key that
may not change in a work dir fails the check.

What the docs write for the reader to fill in is left out of the checks: an
all-caps value (DIR, N, STEP, RECIPE), `...`, `$VARIABLES`, and the synopsis
brackets `[...]`. A synopsis' choices `a|b|c` are each a value of the flag
(--mode), or each parse as the config key's type (eval.weights=raw|ema:
whether one suits a given run is that run's business). The commands that
only print (--print_config, --list) are also run.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from cli import config_loader
from cli import flags_parser
from cli import validation
from configs import default
from configs import schema
from core.errors import UsageError
from tests.helpers import REPO

DEFAULT_RECIPE = os.path.join(REPO, 'configs', 'quickstart.py')
DOC_MACHINE_CORES = 2  # the CPU machine of the docs' commands and figures
PROGRAMS = ('main.py', 'launch.py', 'scripts/slurm_train.sbatch')


def _launch_options() -> frozenset[str]:
  """What launch.py's parser accepts before `--`."""
  with open(os.path.join(REPO, 'launch.py')) as f:
    return frozenset(re.findall(r"add_argument\('(--\w+)'", f.read()))


LAUNCH_OPTIONS = _launch_options()


def doc_paths() -> list[str]:
  return ['README.md'] + sorted(
      os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'docs', '*.md')))


def doc_commands() -> list[tuple[str, str]]:
  """(doc:line, command text) of every command the docs show."""
  found = []
  for path in doc_paths():
    with open(os.path.join(REPO, path)) as f:
      lines = f.read().split('\n')
    fenced, i = False, 0
    while i < len(lines):
      line = lines[i]
      if line.strip().startswith('```'):
        fenced = not fenced
      elif fenced:
        start, text = i, line
        while text.rstrip().endswith('\\') and i + 1 < len(lines):
          i += 1
          text = text.rstrip()[:-1] + ' ' + lines[i].strip()
        found.append((f'{path}:{start + 1}', text))
      else:
        found += [(f'{path}:{i + 1}', m.group(1))
                  for m in re.finditer(r'`(\.venv/bin/python [^`]*)`', line)]
      i += 1
  # A program named without arguments is a mention, not a command.
  return [(where, text) for where, text in found if _arguments(_program(_words(text))[1])]


def _words(text: str) -> list[str]:
  try:
    return shlex.split(text, comments=True)
  except ValueError:  # not shell: an unbalanced quote in prose or output
    return []


def _program(words: list[str]) -> tuple[str | None, list[str]]:
  """The program a command runs and its arguments."""
  for i, word in enumerate(words):
    for program in PROGRAMS:
      if word == program or word.endswith('/' + program):
        return program, words[i + 1:]
  return None, []


def _is_placeholder(value: str) -> bool:
  """What the reader fills in: DIR, HOST0:PORT, configs/RECIPE.py, ..., $@."""
  name = os.path.splitext(os.path.basename(value))[0]
  return ('...' in value or '$' in value or
          re.fullmatch(r'[A-Z][A-Z0-9_]*(:[A-Z0-9_]+)?', name) is not None)


def _arguments(words: list[str]) -> list[str]:
  """The words without the synopsis' brackets and the reader's placeholders."""
  out = []
  for word in words:
    word = word.strip('[]')
    if not word or _is_placeholder(word):
      continue
    name, sep, value = word.partition('=')
    if sep and _is_placeholder(value) or _is_placeholder(name[2:].split('.')[-1]):
      if name.startswith('--config.'):
        continue  # --config.KEY=VALUE: nothing to check
      word = name  # the flag's name is still checked
    out.append(word)
  return out


def _split(words: list[str]):
  """(main.py's own flags, the recipe and --config.KEY=VALUE overrides)."""
  return flags_parser._split_config_flags(['main.py'] + _arguments(words))  # pylint: disable=protected-access


def check_main_arguments(words: list[str], saved_in=None, processes: int = 1,
                         devices_per_process: int = 0) -> int:
  """Raises UsageError (or AssertionError) unless main.py takes these
  arguments; `saved_in`: a work dir whose config.json a run saved there;
  `processes`, `devices_per_process`: launch.py's (0: one per core).
  Returns the number of --config choices parsed."""
  rest, parsed = _split(words)
  keys = schema.dotted_items(default.get_config())
  for word in words:  # --config.KEY=DIR: the key exists, whatever the reader fills in
    name, sep, value = word.strip('[]').partition('=')
    key = name[len('--config.'):]
    if name.startswith('--config.') and sep and _is_placeholder(value):
      assert (key in keys or key in schema.RENAMED_KEYS or _is_placeholder(key)), \
          f'{name}: no such config key'
  given = {}
  for arg in rest[1:]:
    assert arg.startswith('--'), f'{arg}: not a flag'
    name, sep, value = arg[2:].partition('=')
    if name.startswith('no') and name[2:] in flags_parser.FLAGS:
      name, value = name[2:], 'false'
    if name not in flags_parser.FLAGS:
      raise UsageError(f'--{name}: main.py has no such flag')
    flag = flags_parser.FLAGS[name]
    for alternative in value.split('|') if sep else []:
      if not _is_placeholder(alternative):
        flag.parser.parse(alternative)  # ValueError: not a value of the flag
    given[name] = value
  only_prints = 'print_config' in given or 'list' in given or given.get('mode') == 'prepare'
  assert only_prints or 'workdir' in given, 'main.py needs --workdir'
  recipe = parsed.recipe_path
  if recipe is not None:
    assert os.path.isfile(os.path.join(REPO, recipe)), f'--config={recipe}: no such recipe'
    recipe = os.path.join(REPO, recipe)
  # A synopsis' choices (eval.weights=raw|ema) each parse as the key's type.
  single = [(k, v) for k, v in parsed.overrides if '|' not in v]
  choices = [(k, alt) for k, v in parsed.overrides if '|' in v
             for alt in v.split('|') if not _is_placeholder(alt)]
  config_loader.apply_overrides(default.get_config(), choices)
  # Never the checkout's own runs/: the command as the docs tell it.
  config = config_loader.build_config(recipe, single, saved_in or '', DEFAULT_RECIPE)
  validation.check_config(config)
  if (processes and given.get('mode', 'train') in ('train', 'bench', 'eval')
      and 'num_processes' not in given):
    per_process = devices_per_process or config.runtime.num_cpu_devices or DOC_MACHINE_CORES
    validation.check_against_devices(config, num_devices=processes * per_process,
                                     num_processes=processes)
  return len(choices)


def _main_words(text: str) -> list[str]:
  """main.py's arguments in a command (after launch.py's `--`)."""
  program, words = _program(_words(text))
  return words[words.index('--') + 1:] if program == 'launch.py' and '--' in words else words


def _trained_before(commands: list[tuple[str, str]]) -> list[tuple[str, list[str]] | None]:
  """For each command, the work dir it names and the main.py arguments of
  the last earlier command that trained there (None when none did)."""
  trained, found = {}, []
  for _, text in commands:
    words = _main_words(text)
    rest, _ = _split(words)
    flags = dict(a[2:].partition('=')[::2] for a in rest[1:])
    workdir = flags.get('workdir')
    found.append((workdir, trained[workdir]) if workdir in trained else None)
    if workdir and flags.get('mode', 'train') == 'train':
      trained[workdir] = words
  return found


def check_command(text: str, trained=None, tmp_dir: str = '') -> None:
  """`trained`: (work dir, the main.py arguments that trained it)."""
  saved_in = None
  if trained is not None:  # that run's config.json, in a scratch work dir
    _, training = trained
    _, parsed = _split(training)
    recipe = parsed.recipe_path and os.path.join(REPO, parsed.recipe_path)
    saved_in = os.path.join(tmp_dir, 'trained')
    os.makedirs(saved_in, exist_ok=True)
    schema.save(config_loader.build_config(recipe, parsed.overrides, '', DEFAULT_RECIPE),
                saved_in)
  program, words = _program(_words(text))
  if program == 'scripts/slurm_train.sbatch':
    # Hosts of GPUs, one or several processes each: no device check here.
    check_main_arguments(words, saved_in, processes=0)
    return
  launch = {'--processes': 1, '--devices': 0}
  if program == 'launch.py':
    assert '--' in words, "launch.py needs main.py's arguments after --"
    split = words.index('--')
    launch['--processes'] = 2  # launch.py's default
    for option in _arguments(words[:split]):
      name, _, value = option.partition('=')
      assert name in LAUNCH_OPTIONS, f'{name}: launch.py has no such option'
      launch[name] = int(value)
    words = words[split + 1:]
  check_main_arguments(words, saved_in, launch['--processes'], launch['--devices'])


COMMANDS = doc_commands()
TRAINED = _trained_before(COMMANDS)


def test_the_docs_show_commands_of_every_kind():
  programs = {_program(_words(text))[0] for _, text in COMMANDS}
  assert programs == set(PROGRAMS)
  assert len(COMMANDS) > 30


@pytest.mark.parametrize('index', range(len(COMMANDS)), ids=[w for w, _ in COMMANDS])
def test_every_command_in_the_docs_parses_with_an_accepted_config(index, tmp_path):
  check_command(COMMANDS[index][1], TRAINED[index], str(tmp_path))


def test_a_command_on_a_trained_work_dir_starts_from_its_config(tmp_path):
  commands = [('a', 'main.py --workdir=runs/w --config=configs/imagenet_resnet50.py'),
              ('b', 'main.py --workdir=runs/w --mode=eval --config.eval.dataset=imagenet_v2'),
              ('c', 'main.py --workdir=runs/w --config.model.name=vit_b16')]
  trained = _trained_before(commands)
  assert trained[0] is None and trained[1][0] == 'runs/w'
  check_command(commands[1][1], trained[1], str(tmp_path))  # ImageNet's tfds data
  with pytest.raises(UsageError, match='model.name'):  # a key a work dir keeps
    check_command(commands[2][1], trained[2], str(tmp_path))
  with pytest.raises(UsageError, match='eval.dataset'):  # shapes data has no tfds name
    check_command(commands[1][1])


@pytest.mark.parametrize('words', [
    ['--workdir=runs/x', '--mode=train|evaluate'],  # a mode that is not one
    ['--workdir=runs/x', '--config.model.widht=8'],  # a key that is not one
    ['--workdir=runs/x', '--config.batch_size=many'],  # a value of the wrong type
    ['--workdir=runs/x', '--config.sharding_rules=zero3'],  # no such named set
    ['--workdir=runs/x', '--config=configs/nowhere.py'],  # no such recipe
    ['--workdir=runs/x', '--config.optimizer=adam'],  # refused by validation
    ['--config=configs/quickstart.py'],  # training without a work dir
    ['--workdir=runs/x', '--epochs=3'],  # no such flag
    ['--workdir=runs/x', '--config.engine=allreduce', '--config.network.num_workers=4'],
    ['--workdir=runs/x', '--config.mesh.fsdp=4'],  # 4 devices on a 2-core machine
    ['--workdir=runs/x', '--config.init.from_workdr=OTHER_RUN'],  # a misspelt key
])
def test_a_command_with_a_mistake_fails_the_check(words):
  with pytest.raises((UsageError, AssertionError, ValueError)):
    check_main_arguments(words)


def _main_command(text: str) -> list[str]:
  program, words = _program(_words(text))
  assert program == 'main.py'
  return [sys.executable, os.path.join(REPO, 'main.py')] + words


def test_the_commands_that_only_print_run_and_exit_0():
  # Every documented --print_config and --list command, and a named
  # sharding set through main.py itself; in parallel, each in a fresh process.
  printing = sorted({text for _, text in COMMANDS
                     if re.search(r'--(print_config|list=)', text) and '...' not in text})
  assert printing, 'the docs show no --print_config or --list command'
  commands = [_main_command(text) for text in printing]
  commands.append([sys.executable, os.path.join(REPO, 'main.py'),
                   '--config=configs/quickstart.py', '--config.sharding_rules=FSDP',
                   '--print_config'])
  running = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c in commands]
  for command, process in zip(commands, running):
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, (command, stderr[-2000:])
    assert stdout.strip(), command
  assert 'sharding_rules = [["batch", "data,fsdp"], ["embed", "fsdp"], ["conv_out", "fsdp"]]' \
      in stdout.splitlines()
