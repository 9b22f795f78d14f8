"""A benchmark script run as `--layout=PxD`: P processes of D CPU devices
each, joined on 127.0.0.1 and each pinned to a core of its own (a host
each, as benchmarks/mesh_check.py lays them out), every one running the
script again with `--worker`. Process 0 writes the merged result as JSON
to a file the parent reads back.

A script adds these arguments (`add_arguments`), starts its workers' JAX
with `initialize`, hands its merged result to `write_result`, and calls
`run` from its parent.
"""

import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def add_arguments(parser, default_layout: str, default_repeats: int) -> None:
  parser.add_argument('--layout', default=default_layout,
                      help='processes x devices per process')
  parser.add_argument('--repeats', type=int, default=default_repeats)
  # Set by `run` for the workers it starts.
  parser.add_argument('--worker', action='store_true')
  parser.add_argument('--processes', type=int, default=1)
  parser.add_argument('--devices', type=int, default=1)
  parser.add_argument('--process_id', type=int, default=0)
  parser.add_argument('--coordinator', default=None)
  parser.add_argument('--result', default='')


def initialize(args) -> None:
  """A worker's JAX: its devices, joined to the other processes."""
  from cli import runtime  # pylint: disable=g-import-not-at-top
  runtime.restart_with_malloc_tunables()
  runtime.initialize(num_cpu_devices=args.devices, coordinator_address=args.coordinator,
                     num_processes=args.processes, process_id=args.process_id)


def write_result(args, result) -> None:
  """A worker's merged `result`, written by process 0 where `run` reads it."""
  import jax  # pylint: disable=g-import-not-at-top
  if jax.process_index() == 0:
    with open(args.result, 'w') as f:
      json.dump(result, f)


def run(script: str, layout: str, repeats: int):
  """`script --worker` on the processes of `layout`; what process 0 wrote."""
  from cli import launcher  # pylint: disable=g-import-not-at-top
  processes, devices = (int(v) for v in layout.split('x'))
  result = os.path.join(tempfile.mkdtemp(prefix='process_layout_'), 'result.json')
  port = launcher.free_port()
  cores = os.cpu_count() or 1
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('XLA_FLAGS', None)
  commands = []
  for i in range(processes):
    pin = ['taskset', '-c', str(i % cores)] if processes > 1 else []
    commands.append([*pin, sys.executable, os.path.abspath(script), '--worker',
                     f'--processes={processes}', f'--devices={devices}', f'--process_id={i}',
                     f'--coordinator=127.0.0.1:{port}', f'--repeats={repeats}',
                     f'--result={result}'])
  running = [subprocess.Popen(c, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
             for c in commands]
  for i, p in enumerate(running):
    _, err = p.communicate()
    if p.returncode != 0:
      raise RuntimeError(f'process {i} failed ({p.returncode}): {err[-3000:]}')
  with open(result) as f:
    return json.load(f)
