"""Every main.py and launch.py command that README.md or docs/*.md shows
parses, and each that runs in seconds here runs and exits as the doc says.

A command is a line of a code block (with its backslash continuations) that
runs `main.py`, `launch.py` or `scripts/slurm_train.sbatch`, or an inline
span that names one of them with arguments, in any form: `.venv/bin/python
main.py ...`, `python main.py ...`, `main.py --mode=eval ...`, `launch.py
--processes=2 -- ...`, wrapped across lines or not. An inline span without
the interpreter is a fragment of a command: its flags, values and config are
checked, not that it is whole (a work dir, launch.py's `--`, the devices).
Each is checked without running it, by the
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
whether one suits a given run is that run's business).

Run as well (quick_commands), in a scratch work dir, two at a time: every
command that only prints (--print_config, --list), which must exit 0 and
print, and every command the doc says exits 2 (its `# exits 2` comment, the
rest of its sentence, or the sentence just after its block: "which exits 2",
"It exits 2."), which must exit 2: a refusal comes before any work. The
rest train, measure or wait for a signal: parsed, not run.
"""

import glob
import os
import re
import shlex
import subprocess
import sys
from typing import NamedTuple

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


class DocCommand(NamedTuple):
  where: str  # doc:line
  text: str
  # False: an inline span without the interpreter (`main.py --mode=study`,
  # `launch.py --devices=0`), a fragment of a command: its flags, values and
  # config are checked, not that it names everything a run needs.
  complete: bool
  # The exit code the doc gives it: its own `# ...` comment, the rest of its
  # sentence, or the sentence just after its block says so (_SAYS_EXIT);
  # None when the doc gives none.
  says_exit: int | None


_NAMES_A_PROGRAM = re.compile(
    r'(?:^|[\s/])(?:' + '|'.join(re.escape(p) for p in PROGRAMS) + r')(?:\s|$)')
# The exit a command's own comment, or the words just after it, give: "#
# exits 2", ", which exits 0", "It exits 75." (each command of the block).
_SAYS_EXIT = re.compile(
    r'^[\s,:;(-]*(?:(?:it|which|this|the command|each|both|all)\s+)?(?:then\s+)?'
    r'(?:exits?|stops? with exit)(?: with)?(?: code)?\s+(\d+)\b', re.IGNORECASE)


def _says_exit(text: str) -> int | None:
  found = _SAYS_EXIT.search(text)
  return int(found.group(1)) if found else None


def _sentence_after(text: str, start: int) -> str:
  """The prose from `start` to the end of its sentence (or paragraph)."""
  end = re.search(r'[.:;](?:\s|$)|\n\s*\n', text[start:])
  return text[start:start + end.start() if end else len(text)]


def commands_in(path: str, text: str) -> list[DocCommand]:
  """Every command of a doc: each line of a code block (with its backslash
  continuations), and each inline `span` that names main.py, launch.py or
  the SLURM script, wrapped across lines or not."""
  lines = text.split('\n')
  found, prose, fenced, block, i = [], [], False, 0, 0
  while i < len(lines):
    line = lines[i]
    prose.append('')
    if line.strip().startswith('```'):
      fenced = not fenced
      if fenced:
        block = len(found)
      else:  # what the text says just after the block
        said = _says_exit(_sentence_after('\n'.join(lines[i + 1:]), 0))
        found[block:] = [c if c.says_exit is not None else c._replace(says_exit=said)
                         for c in found[block:]]
    elif fenced:
      start, command = i, line
      while command.rstrip().endswith('\\') and i + 1 < len(lines):
        i += 1
        command = command.rstrip()[:-1] + ' ' + lines[i].strip()
        prose.append('')
      comment = command.partition(' #')[2] if '#' in command else ''
      found.append(DocCommand(f'{path}:{start + 1}', command, True, _says_exit(comment)))
    else:
      prose[-1] = line
    i += 1
  prose_text = '\n'.join(prose)
  for m in re.finditer(r'(?<!`)`([^`]+)`(?!`)', prose_text):
    span = ' '.join(m.group(1).split())
    if not _NAMES_A_PROGRAM.search(span):
      continue
    line = prose_text.count('\n', 0, m.start()) + 1
    complete = re.match(r'(?:\S*/)?python[\d.]* ', span) is not None
    found.append(DocCommand(f'{path}:{line}', span, complete,
                            _says_exit(_sentence_after(prose_text, m.end()))))
  # A program named without arguments is a mention, not a command.
  return [c for c in found if _arguments(_program(_words(c.text))[1])]


def doc_commands() -> list[DocCommand]:
  """Every command the docs show, README.md first, then docs/ in order."""
  found = []
  for path in doc_paths():
    with open(os.path.join(REPO, path)) as f:
      found += commands_in(path, f.read())
  return found


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
                         devices_per_process: int = 0, complete: bool = True) -> int:
  """Raises UsageError (or AssertionError) unless main.py takes these
  arguments; `saved_in`: a work dir whose config.json a run saved there;
  `processes`, `devices_per_process`: launch.py's (0: one per core);
  `complete`: False for a fragment, which need not name a work dir nor fit
  the devices. Returns the number of --config choices parsed."""
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
  assert only_prints or 'workdir' in given or not complete, 'main.py needs --workdir'
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
  if (complete and processes and given.get('mode', 'train') in ('train', 'bench', 'eval')
      and 'num_processes' not in given):
    per_process = devices_per_process or config.runtime.num_cpu_devices or DOC_MACHINE_CORES
    validation.check_against_devices(config, num_devices=processes * per_process,
                                     num_processes=processes)
  return len(choices)


def _main_words(text: str) -> list[str]:
  """main.py's arguments in a command (after launch.py's `--`)."""
  program, words = _program(_words(text))
  return words[words.index('--') + 1:] if program == 'launch.py' and '--' in words else words


def _trained_before(commands: list[str]) -> list[tuple[str, list[str]] | None]:
  """For each command, the work dir it names and the main.py arguments of
  the last earlier command that trained there (None when none did)."""
  trained, found = {}, []
  for text in commands:
    words = _main_words(text)
    rest, _ = _split(words)
    flags = dict(a[2:].partition('=')[::2] for a in rest[1:])
    workdir = flags.get('workdir')
    found.append((workdir, trained[workdir]) if workdir in trained else None)
    if workdir and flags.get('mode', 'train') == 'train':
      trained[workdir] = words
  return found


def check_command(text: str, trained=None, tmp_dir: str = '', complete: bool = True) -> None:
  """`trained`: (work dir, the main.py arguments that trained it);
  `complete`: False for an inline fragment (DocCommand.complete)."""
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
    check_main_arguments(words, saved_in, processes=0, complete=complete)
    return
  launch = {'--processes': 1, '--devices': 0}
  if program == 'launch.py':
    assert '--' in words or not complete, "launch.py needs main.py's arguments after --"
    split = words.index('--') if '--' in words else len(words)
    launch['--processes'] = 2  # launch.py's default
    for option in _arguments(words[:split]):
      name, _, value = option.partition('=')
      assert name in LAUNCH_OPTIONS, f'{name}: launch.py has no such option'
      launch[name] = int(value)
    words = words[split + 1:]
  if words or complete:
    check_main_arguments(words, saved_in, launch['--processes'], launch['--devices'],
                         complete)


COMMANDS = doc_commands()
TRAINED = _trained_before([c.text for c in COMMANDS])


def test_the_docs_show_commands_of_every_kind():
  programs = {_program(_words(c.text))[0] for c in COMMANDS}
  assert programs == set(PROGRAMS)
  assert len(COMMANDS) > 30
  assert any(not c.complete for c in COMMANDS)  # inline fragments are found


@pytest.mark.parametrize('index', range(len(COMMANDS)), ids=[c.where for c in COMMANDS])
def test_every_command_in_the_docs_parses_with_an_accepted_config(index, tmp_path):
  command = COMMANDS[index]
  check_command(command.text, TRAINED[index], str(tmp_path), command.complete)


_DOC = """# A page

Evaluate with `main.py --mode=eval --workdir=runs/x`, list with `python main.py
--list=recipes`, or run `launch.py --processes=2 -- --workdir=runs/y
--mode=bench`, which exits 0. `launch.py` alone is a mention.

```
.venv/bin/python main.py --workdir=runs/z \\
    --mode=plan   # exits 2: no devices
.venv/bin/python main.py --list=models
```

Each exits 0. The first stops with exit 2 when it is wrong.
"""


def test_commands_are_found_in_blocks_and_inline_in_every_form():
  found = commands_in('page.md', _DOC)
  assert [(c.where, c.text, c.complete, c.says_exit) for c in found] == [
      ('page.md:8', '.venv/bin/python main.py --workdir=runs/z  --mode=plan   # exits 2: '
       'no devices', True, 2),
      ('page.md:10', '.venv/bin/python main.py --list=models', True, 0),
      ('page.md:3', 'main.py --mode=eval --workdir=runs/x', False, None),
      ('page.md:3', 'python main.py --list=recipes', True, None),
      ('page.md:4', 'launch.py --processes=2 -- --workdir=runs/y --mode=bench', False, 0),
  ]


def test_an_inline_fragment_is_checked_flag_by_flag():
  check_command('main.py --mode=study', complete=False)
  check_command('launch.py --devices=0', complete=False)
  with pytest.raises(UsageError, match='--epochs'):
    check_command('main.py --epochs=3', complete=False)
  with pytest.raises(AssertionError, match='--device'):
    check_command('launch.py --device=0', complete=False)
  with pytest.raises(AssertionError, match='--workdir'):  # a whole command must name one
    check_command('python main.py --mode=study')


def test_a_command_on_a_trained_work_dir_starts_from_its_config(tmp_path):
  commands = ['main.py --workdir=runs/w --config=configs/imagenet_resnet50.py',
              'main.py --workdir=runs/w --mode=eval --config.eval.dataset=imagenet_v2',
              'main.py --workdir=runs/w --config.model.name=vit_b16']
  trained = _trained_before(commands)
  assert trained[0] is None and trained[1][0] == 'runs/w'
  check_command(commands[1], trained[1], str(tmp_path))  # ImageNet's tfds data
  with pytest.raises(UsageError, match='model.name'):  # a key a work dir keeps
    check_command(commands[2], trained[2], str(tmp_path))
  with pytest.raises(UsageError, match='eval.dataset'):  # shapes data has no tfds name
    check_command(commands[1])


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


def quick_commands(commands: list[DocCommand]) -> list[tuple[DocCommand, list[str], int]]:
  """Of `commands`, those that run in seconds here, with the argv to run and
  the exit the doc gives: those that only print (--print_config, --list:
  exit 0) and those the doc says exit 2 (a refusal of flags, config or data,
  before any work). One with something for the reader to fill in (DIR,
  `...`, `$@`, [synopsis]) is not run; a fragment is run as the command it
  names. Anything else trains, measures or waits for a signal: not run."""
  found, seen = [], set()
  for command in commands:
    program, words = _program(_words(command.text))
    prints = any(re.match(r'--(print_config|list=)', w) for w in _main_words(command.text))
    refused = command.says_exit == 2
    if program not in ('main.py', 'launch.py') or not (prints or refused):
      continue
    if _arguments(words) != words or (tuple(words), program) in seen:
      continue
    seen.add((tuple(words), program))
    expected = 2 if refused else 0
    found.append((command, [sys.executable, os.path.join(REPO, program), *words], expected))
  return found


def _in_scratch(argv: list[str], tmp_dir: str) -> list[str]:
  """The command with its work dir under `tmp_dir`: never the checkout's runs/."""
  return [f'--workdir={os.path.join(tmp_dir, a.partition("=")[2])}'
          if a.startswith('--workdir=') else a for a in argv]


def _run_two_at_a_time(commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
  """Each in a fresh process, two at once (the 2-core machine)."""
  results = [None] * len(commands)
  for first in range(0, len(commands), 2):
    running = [(i, subprocess.Popen(commands[i], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True))
               for i in range(first, min(first + 2, len(commands)))]
    for i, process in running:
      stdout, stderr = process.communicate(timeout=300)
      results[i] = subprocess.CompletedProcess(commands[i], process.returncode, stdout, stderr)
  return results


def test_the_quick_commands_run_and_exit_as_the_docs_say(tmp_path):
  # Also a named sharding set through main.py itself.
  quick = quick_commands(COMMANDS)
  assert any(expected == 0 for _, _, expected in quick), 'no --print_config or --list'
  commands = [_in_scratch(argv, str(tmp_path)) for _, argv, _ in quick]
  commands.append([sys.executable, os.path.join(REPO, 'main.py'),
                   '--config=configs/quickstart.py', '--config.sharding_rules=FSDP',
                   '--print_config'])
  results = _run_two_at_a_time(commands)
  wrong = [f'{command.where}: exits {result.returncode}, the doc says {expected}: '
           f'{command.text}\n{result.stderr[-1500:]}'
           for (command, _, expected), result in zip(quick, results)
           if result.returncode != expected]
  assert not wrong, '\n'.join(wrong)
  for (command, _, expected), result in zip(quick, results):
    assert expected != 0 or result.stdout.strip(), f'{command.where}: printed nothing'
  assert results[-1].returncode == 0, results[-1].stderr[-2000:]
  assert 'sharding_rules = [["batch", "data,fsdp"], ["embed", "fsdp"], ["conv_out", "fsdp"]]' \
      in results[-1].stdout.splitlines()


def test_a_command_is_quick_when_it_only_prints_or_the_doc_gives_its_exit():
  commands = commands_in('page.md', _DOC) + commands_in(
      'other.md', '`main.py --list=models`, and `main.py --workdir=DIR --print_config`.')
  quick = [(c.where, argv[2:], expected) for c, argv, expected in quick_commands(commands)]
  assert quick == [
      ('page.md:8', ['--workdir=runs/z', '--mode=plan'], 2),  # its comment says so
      ('page.md:10', ['--list=models'], 0),  # only prints
      ('page.md:3', ['--list=recipes'], 0),
  ]  # not the bench of page.md:4 (it trains), nor other.md's: a repeat, and a DIR
