#!/usr/bin/env bash
# The GPU speed check: ResNet-50 and ViT-B/16 at 224 px in bfloat16, with
# --mode=bench (synthetic data, every visible GPU data-parallel). Prints the
# two JSON lines and appends them to WORKDIR/bench.jsonl.
#
#   pip install -U "jax[cuda12]"        # once, on the GPU machine
#   benchmarks/gpu_bench.sh [WORKDIR] [BATCH_PER_GPU]
#
# Targets (README "Performance"): ResNet-50 >= 5,000 images/s and ViT-B/16
# >= 40% MFU on one H200.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WORKDIR=${1:-runs/gpu_bench}
PER_GPU=${2:-256}
GPUS=$("$PYTHON" -c 'import jax; print(jax.device_count())')
for model in resnet50 vit_b16; do
  "$PYTHON" main.py --mode=bench --workdir="$WORKDIR" \
    --config.model.name="$model" --config.model.width=0 \
    --config.model.dtype=bfloat16 --config.data.image_size=224 \
    --config.batch_size=$((PER_GPU * GPUS)) --config.data.prefetch_batches=4 \
    --config.bench.steps=50 --config.bench.warmup_steps=5 | tail -n 1
done
