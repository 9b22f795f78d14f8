"""docs/planner.md's `--mode=plan` example, run once and kept with its provenance.

  .venv/bin/python benchmarks/plan_example.py --out=results/plan/resnet50_64_devices.jsonl

Runs the page's command (PLAN_ARGS) in a fresh work dir with this
interpreter and writes one record: the plan.json it wrote (`plan`) and what
it printed (`printed`), with the provenance of benchmarks/provenance.py.
The plan compiles each batch's program and runs none; it times the shards'
update on this machine, so its PS figures follow this machine's CPU.
tests/test_doc_outputs.py renders the page's output block from the record.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from benchmarks import provenance

# docs/planner.md's command, less its --workdir.
PLAN_ARGS = [
    '--mode=plan', '--config.model.name=resnet50', '--config.model.width=0',
    '--config.data.image_size=224', '--config.plan.num_workers=64',
    '--config.plan.devices_per_host=8', '--config.plan.link_bandwidth_gbps=200',
    '--config.plan.intra_host_gbps=2400', '--config.plan.device_tflops=990',
    '--config.plan.overlap=true', '--config.plan.per_worker_batch_sizes=32,64,128,256',
]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  provenance.add_out_argument(parser)
  args = parser.parse_args()
  results = provenance.Results(args.out)
  with tempfile.TemporaryDirectory() as scratch:
    run = subprocess.run([sys.executable, 'main.py', f'--workdir={scratch}', *PLAN_ARGS],
                         cwd=provenance.REPO, capture_output=True, text=True, check=False)
    if run.returncode:
      sys.stderr.write(run.stderr[-2000:])
      sys.exit(run.returncode)
    with open(os.path.join(scratch, 'plan.json')) as f:
      plan = json.load(f)
  results.write({'main_args': PLAN_ARGS, 'plan': plan, 'printed': run.stdout.rstrip('\n')})


if __name__ == '__main__':
  main()
