"""The modes other than train, each on a trained work dir or the configured step.

  eval.py     --mode=eval: choose and restore a checkpoint, evaluate it
              (the pass of trainer/evaluate.py), print the summary line
  predict.py  --mode=predict: classify image files with a checkpoint
  export.py   --mode=export: a checkpoint as a TensorFlow SavedModel
  bench.py    --mode=bench: time the configured train step
  checks.py   their keys (bench.*, eval.checkpoint, predict.top_k), checked
              before the runtime starts: the modules above start a JAX
              backend when imported

cli/modes.py dispatches to them; they import trainer/ and what lies below it,
and nothing of planner/ or probe/.
"""
