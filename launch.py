"""Runs a main.py command as several processes on this machine.

  python launch.py --processes=2 --devices=4 -- --workdir=runs/two --config=...

starts 2 processes with 4 emulated CPU devices each, joined on 127.0.0.1,
all running `main.py --workdir=runs/two --config=...` (see cli/launcher.py for
what it does with output, signals, failures and its own death). --devices=0
leaves each process the machine's own devices.
"""

import argparse
import os
import sys

from cli import launcher
from core.errors import EXIT_USAGE

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'main.py')


def main(argv: list[str]) -> int:
  ours, sep, theirs = _split(argv)
  parser = argparse.ArgumentParser(prog='launch.py', add_help=True)
  parser.add_argument('--processes', type=int, default=2, help='processes to start')
  parser.add_argument('--devices', type=int, default=0,
                      help='emulated CPU devices per process (0: the machine\'s own)')
  parser.add_argument('--port', type=int, default=0,
                      help='coordinator port on 127.0.0.1 (0: a free one)')
  try:
    options = parser.parse_args(ours)
  except SystemExit as e:
    return int(e.code or 0)
  for message in (
      None if sep else 'give main.py\'s arguments after --',
      None if options.processes >= 1 else f'--processes={options.processes} must be >= 1',
      None if options.devices >= 0 else f'--devices={options.devices} must be >= 0',
      None if any(a.startswith('--workdir') for a in theirs) else
      'main.py needs --workdir after --',
      next((f'{a}: the launcher sets it' for a in theirs if a.split('=')[0] in (
          '--coordinator_address', '--num_processes', '--process_id')), None)):
    if message:
      print(f'error: {message}', file=sys.stderr)
      return EXIT_USAGE
  return launcher.run(MAIN, theirs, options.processes, options.devices, options.port)


def _split(argv):
  if '--' in argv:
    i = argv.index('--')
    return argv[:i], True, argv[i + 1:]
  return argv, False, []


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
