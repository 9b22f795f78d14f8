"""Command-line parsing that ends every mistake with one line and exit 2.

absl's config_flags prints a traceback and exits 1 on an unknown config key,
so `--config` and `--config.KEY=VALUE` are taken out of argv here and handed
to cli.config_loader; the remaining flags go through absl, whose errors are
caught and turned into UsageError.
"""

import dataclasses

from absl import flags

from cli import workdir as workdir_lib
from configs.errors import UsageError

FLAGS = flags.FLAGS
_HELP_FLAGS = ('--help', '-h', '-?', '--helpshort', '--helpfull', '--helpxml')
MODES = ('train', 'eval', 'predict', 'export', 'bench', 'plan', 'study', 'prepare', 'probe')

flags.DEFINE_string('workdir', None, 'Work dir: checkpoints, metrics, config.json.')
flags.DEFINE_enum('mode', 'train', MODES, 'What to run.')
flags.DEFINE_string('coordinator_address', None,
                    'HOST:PORT of process 0, for multi-process runs.')
flags.DEFINE_integer('num_processes', 1, 'Processes in a multi-process run.')
flags.DEFINE_integer('process_id', 0, 'This process in a multi-process run.')
flags.DEFINE_boolean('print_config', False,
                     'Print the resolved config (recipe, the work dir\'s '
                     'config.json, --config.KEY=VALUE), each key with its value '
                     'and meaning, and exit. Needs no --workdir.')
flags.DEFINE_enum('list', None, ('models', 'recipes'),
                  'List the model names or the recipes (configs/*.py), and exit.')
# Documentation only: --config and --config.KEY=VALUE are taken out of argv
# before absl parses it (see the module docstring), so absl never sets this.
flags.DEFINE_string('config', None,
                    'A recipe, configs/RECIPE.py (default: the work dir\'s '
                    'config.json, else configs/quickstart.py). Set any key with '
                    '--config.KEY=VALUE, e.g. --config.batch_size=256; '
                    '--print_config lists every key and docs/configuration.md '
                    'explains them.')


@dataclasses.dataclass
class ParsedArgs:
  recipe_path: str | None  # --config=PATH, None when not given
  overrides: list[tuple[str, str]]  # (dotted key, text) from --config.KEY=TEXT


PARSED = ParsedArgs(None, [])


def _split_config_flags(argv: list[str]) -> tuple[list[str], ParsedArgs]:
  rest, parsed = [argv[0]], ParsedArgs(None, [])
  args = iter(argv[1:])
  for arg in args:
    if arg == '--config' or arg.startswith('--config=') or arg.startswith('--config.'):
      name, sep, value = arg[2:].partition('=')
      if not sep:
        value = next(args, None)
        if value is None:
          raise UsageError(f'--{name} needs a value')
      if name == 'config':
        parsed.recipe_path = value
      else:
        key = name[len('config.'):]
        if not key:
          raise UsageError(f'{arg}: expected --config.KEY=VALUE')
        parsed.overrides.append((key, value))
    else:
      rest.append(arg)
  return rest, parsed


def parse(argv: list[str]) -> list[str]:
  """absl flags_parser: parses argv or raises UsageError."""
  rest, parsed = _split_config_flags(argv)
  PARSED.recipe_path, PARSED.overrides = parsed.recipe_path, parsed.overrides
  try:
    remaining = FLAGS(rest)
  except flags.Error as e:
    raise UsageError(str(e).splitlines()[0]) from None
  except SystemExit as e:
    # absl prints the help and exits 1; asking for help is no failure.
    if e.code == 1 and any(a in _HELP_FLAGS for a in rest[1:]):
      raise SystemExit(0) from None
    raise
  if len(remaining) > 1:
    raise UsageError(f'unexpected arguments: {" ".join(remaining[1:])}')
  if FLAGS.workdir:
    # Expanded once, here: everything after reads FLAGS.workdir.
    FLAGS.workdir = workdir_lib.expand(FLAGS.workdir)
  if FLAGS.print_config or FLAGS.list or FLAGS.mode == 'prepare':
    return remaining  # they write nothing there, and need no work dir
  if not FLAGS.workdir:
    raise UsageError('--workdir is required')
  workdir_lib.check(FLAGS.workdir)
  if FLAGS.num_processes < 1 or not 0 <= FLAGS.process_id < FLAGS.num_processes:
    raise UsageError(f'--process_id={FLAGS.process_id} must be in '
                     f'[0, --num_processes={FLAGS.num_processes})')
  if FLAGS.num_processes > 1 and not FLAGS.coordinator_address:
    raise UsageError('--num_processes > 1 needs --coordinator_address=HOST:PORT')
  return remaining
