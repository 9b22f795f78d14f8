#!/usr/bin/env bash
# The GPU speed check: ResNet-50 and ViT-B/16 at 224 px with --mode=bench on
# synthetic data, model.dtype=auto (bfloat16 on GPUs), every visible GPU
# data-parallel. Prints one JSON line per model and appends it to OUT, with
# the main.py command that measured it, the date, the commit and the hardware
# (benchmarks/provenance.py).
#
#   make test ACCEL=cuda12     # once, the pinned install into .venv (or cuda13)
#   benchmarks/gpu_bench.sh OUT.jsonl [BATCH_PER_GPU]
#
# ACCEL=cuda12 (or cuda13) before the command makes that install first when
# .venv lacks it. PYTHON picks another interpreter (default .venv/bin/python);
# a machine without network: scripts/gpu_bundle.sh prepares a folder whose
# run.sh calls this script. Each model gets MODEL_TIMEOUT_S seconds (default
# 240), so that the whole check ends within 10 minutes.
# GPU_BENCH_CPU_CHECK=1: tiny models at 32 px for a few steps on one CPU
# device, to check the script on a machine without a GPU (not a measurement).

set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
  echo "usage: benchmarks/gpu_bench.sh OUT.jsonl [BATCH_PER_GPU]" >&2
  exit 2
fi
OUT=$1
PER_GPU=${2:-256}
if [[ -n "${ACCEL:-}" ]]; then
  make --no-print-directory -s .venv/.installed ACCEL="$ACCEL"
fi
PYTHON=${PYTHON:-.venv/bin/python}
MODEL_TIMEOUT_S=${MODEL_TIMEOUT_S:-240}

STEPS=50 WARMUP=5 IMAGE_SIZE=224
declare -A WIDTH=([resnet50]=0 [vit_b16]=0) DEPTH=([resnet50]=0 [vit_b16]=0)
EXTRA=()
if [[ "${GPU_BENCH_CPU_CHECK:-}" == 1 ]]; then
  STEPS=2 WARMUP=1 IMAGE_SIZE=32 PER_GPU=${2:-4}
  WIDTH=([resnet50]=8 [vit_b16]=64) DEPTH=([resnet50]=0 [vit_b16]=1)
  EXTRA=(--config.runtime.num_cpu_devices=1)
fi

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# Provenance once for both models (it starts JAX in a child to see the
# devices); it also checks OUT before anything is measured.
"$PYTHON" - "$OUT" "$SCRATCH/provenance.json" <<'EOF'
import json, os, sys
sys.path.insert(0, 'benchmarks')
import provenance
out, path = sys.argv[1:]
provenance.Results(out=out, provenance={})  # exit 2 with one line if OUT cannot be written
record = provenance.collect()
if os.path.exists('BUNDLE_COMMIT'):  # scripts/gpu_bundle.sh's copy has no .git
  with open('BUNDLE_COMMIT') as f:
    record['commit'] = f.read().strip()
with open(path, 'w') as f:
  json.dump(record, f)
EOF
read -r PLATFORM DEVICES < <("$PYTHON" -c '
import json, sys
h = json.load(open(sys.argv[1]))["hardware"]
print(h["platform"], h["num_devices"] or 0)' "$SCRATCH/provenance.json")
if [[ "$PLATFORM" != gpu && "${GPU_BENCH_CPU_CHECK:-}" != 1 ]]; then
  echo "error: JAX sees no GPU here (platform $PLATFORM); install its CUDA plugin:" \
       "make test ACCEL=cuda12 (or cuda13)" >&2
  exit 2
fi
[[ "$PLATFORM" == gpu ]] || DEVICES=1

status=0
for model in resnet50 vit_b16; do
  command=(main.py --mode=bench --workdir="$SCRATCH/$model"
           --config.model.name="$model" --config.model.width="${WIDTH[$model]}"
           --config.model.depth="${DEPTH[$model]}" --config.data.source=synthetic
           --config.data.image_size="$IMAGE_SIZE" --config.batch_size=$((PER_GPU * DEVICES))
           --config.data.prefetch_batches=4 --config.bench.steps="$STEPS"
           --config.bench.warmup_steps="$WARMUP" "${EXTRA[@]}")
  if ! line=$(timeout "$MODEL_TIMEOUT_S" "$PYTHON" "${command[@]}" | tail -n 1) \
      || [[ "$line" != "{"* ]]; then
    echo "gpu_bench: $model failed or ran past ${MODEL_TIMEOUT_S}s" >&2
    status=1
    continue
  fi
  "$PYTHON" - "$OUT" "$SCRATCH/provenance.json" "$line" "${command[@]}" <<'EOF'
import json, sys
sys.path.insert(0, 'benchmarks')
import provenance
out, path, line, *command = sys.argv[1:]
# The work dir was a temporary folder that only received bench.jsonl.
command = ['--workdir=WORKDIR' if a.startswith('--workdir=') else a for a in command]
with open(path) as f:
  record = {**json.load(f), 'command': command}
provenance.Results(out=out, provenance=record).write(json.loads(line))
EOF
done
exit "$status"
