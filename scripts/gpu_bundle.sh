#!/usr/bin/env bash
# Prepares DIR for a GPU machine without network whose Python 3.12 already has
# jax and jaxlib with a CUDA plugin, flax, optax, orbax-checkpoint, absl-py,
# tensorboard, matplotlib and pillow, but neither TensorFlow nor
# ml_collections. DIR gets:
#   imagetrain/  the project's files as in this working tree: tracked ones
#                and new ones git does not ignore (BUNDLE_COMMIT: HEAD's
#                hash, "-dirty" when the tree differs from it)
#   wheels/      the small wheels that stack may lack: ml_collections (pinned
#                in requirements.txt) and PyYAML, which it needs (flax brings
#                it too); modules.txt names the module each one provides
#   run.sh       installs each wheel whose module the machine's Python cannot
#                import into DIR/site, offline, and runs
#                imagetrain/benchmarks/gpu_bench.sh with it
# and prints the command to run there.
#
#   scripts/gpu_bundle.sh DIR
#
# GPU_BUNDLE_PLATFORM: the wheels' platform (default manylinux_2_17_x86_64;
# manylinux_2_17_aarch64 for a Grace Hopper machine).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: scripts/gpu_bundle.sh DIR" >&2
  exit 2
fi
DIR=$1
if [[ -e "$DIR" && -n "$(ls -A "$DIR" 2>/dev/null)" ]]; then
  echo "error: $DIR exists and is not empty; give a new folder" >&2
  exit 2
fi
PLATFORM=${GPU_BUNDLE_PLATFORM:-manylinux_2_17_x86_64}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
[[ -x "$PYTHON" ]] || PYTHON=python3

mkdir -p "$DIR/imagetrain" "$DIR/wheels"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard \
   | tar --null --files-from=- --ignore-failed-read -cf -) \
  | tar -xf - -C "$DIR/imagetrain"
commit=$(git -C "$REPO" rev-parse HEAD)
if [[ -n "$(git -C "$REPO" status --porcelain)" ]]; then
  commit+=-dirty
fi
echo "$commit" >"$DIR/imagetrain/BUNDLE_COMMIT"

ml_collections=$(grep -E '^ml_collections==' "$REPO/requirements.txt")
# requirement -> module it provides (run.sh installs a wheel only when its
# module is missing, so the machine's own packages are never shadowed).
declare -A MODULES=([$ml_collections]=ml_collections [PyYAML==6.0.4]=yaml)
: >"$DIR/wheels/modules.txt"
for requirement in "${!MODULES[@]}"; do
  before=$(ls "$DIR/wheels")
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform "$PLATFORM" \
    --dest "$DIR/wheels" "$requirement"
  wheel=$(comm -13 <(echo "$before") <(ls "$DIR/wheels"))
  echo "$wheel ${MODULES[$requirement]}" >>"$DIR/wheels/modules.txt"
done

cat >"$DIR/run.sh" <<'EOF'
#!/usr/bin/env bash
# Measures ResNet-50 and ViT-B/16 on this machine's GPUs (scripts/gpu_bundle.sh
# made this folder):  ./run.sh OUT.jsonl [BATCH_PER_GPU]
# PYTHON: the Python with jax, flax, optax and orbax (default python3). The
# wheels go to site/ beside this script, on PYTHONPATH, rather than into a
# venv: a venv made from another venv's or conda's Python does not see that
# environment's packages.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
missing=$("$PYTHON" -c '
import importlib.util
stack = ("jax", "flax", "optax", "orbax.checkpoint", "absl", "numpy", "PIL")
print(" ".join(m for m in stack if importlib.util.find_spec(m.split(".")[0]) is None))')
if [[ -n "$missing" ]]; then
  echo "error: $PYTHON lacks $missing, which this folder does not bring" >&2
  exit 2
fi
export PYTHONPATH=$HERE/site${PYTHONPATH:+:$PYTHONPATH}
while read -r wheel module; do
  if ! "$PYTHON" -c "import $module" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$HERE/site" \
      "$HERE/wheels/$wheel"
  fi
done <"$HERE/wheels/modules.txt"
PYTHON=$("$PYTHON" -c 'import sys; print(sys.executable)') \
  exec "$HERE/imagetrain/benchmarks/gpu_bench.sh" "$@"
EOF
chmod +x "$DIR/run.sh"
echo "$(du -sh "$DIR" | cut -f1) in $DIR. On the GPU machine, in that folder:"
echo "  ./run.sh gpu_bench.jsonl"
