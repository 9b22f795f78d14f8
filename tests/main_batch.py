"""Runs main.py's entry point for many command lines, one forked child each.

  python tests/main_batch.py RESULTS.json < invocations.json

Reads a JSON list of argument lists (what follows `main.py` on a command
line), imports main.py once, then for each list forks a child that runs
main.py's `app.run` on it with its standard output and error sent to files
of its own, and writes a JSON list of {returncode, stdout, stderr} to
RESULTS.json. The children share the import (seconds of CPU each as
separate processes) and nothing else: each parses its own flags and starts
its own runtime, in a process of its own. tests/helpers.py's run_main_many calls it for the
tests that run many short invocations (bad flags, bad files).
"""

import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_child(args: list[str], out_path: str, err_path: str) -> None:
  """In the forked child: main.py on `args`; never returns."""
  code = 1
  try:
    for fd, path in ((1, out_path), (2, err_path)):
      os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    import main  # pylint: disable=g-import-not-at-top
    from absl import app  # pylint: disable=g-import-not-at-top
    sys.argv = [os.path.join(REPO, 'main.py'), *args]
    try:
      app.run(main.main, flags_parser=main.parse_flags)
      code = 0
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException:  # pylint: disable=broad-except
    import traceback  # pylint: disable=g-import-not-at-top
    traceback.print_exc()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access


def main() -> None:
  invocations = json.load(sys.stdin)
  sys.path.insert(0, REPO)
  os.chdir(REPO)
  import main as _  # pylint: disable=g-import-not-at-top,unused-import  # once, before the forks
  results = []
  with tempfile.TemporaryDirectory() as scratch:
    for number, args in enumerate(invocations):
      out_path = os.path.join(scratch, f'{number}.out')
      err_path = os.path.join(scratch, f'{number}.err')
      pid = os.fork()
      if pid == 0:
        _run_child(args, out_path, err_path)
      _, status = os.waitpid(pid, 0)
      with open(out_path) as out, open(err_path) as err:
        results.append({'returncode': os.waitstatus_to_exitcode(status),
                        'stdout': out.read(), 'stderr': err.read()})
  with open(sys.argv[1], 'w') as f:
    json.dump(results, f)


if __name__ == '__main__':
  main()
