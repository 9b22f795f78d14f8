"""One `main.py --mode=bench` run in a fresh process and work dir, as a user
would start it (compile time included); shared by the benchmark scripts."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_json_line(stdout: str) -> dict:
  for line in reversed(stdout.strip().splitlines()):
    if line.startswith('{'):
      return json.loads(line)
  raise RuntimeError('no JSON line in the output')


def run_bench(args: list[str], env: dict[str, str] | None = None,
              tree: str = ROOT) -> dict:
  """The JSON record of `TREE/main.py --mode=bench ARGS` (env: variables set
  on top of this process's; tree: a checkout, this one by default)."""
  with tempfile.TemporaryDirectory() as workdir:
    command = [sys.executable, os.path.join(tree, 'main.py'), '--mode=bench',
               f'--workdir={workdir}', *args]
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, cwd=tree, check=False)
  if result.returncode != 0:
    raise RuntimeError(f'{" ".join(command)} failed:\n{result.stderr[-3000:]}')
  return last_json_line(result.stdout)
