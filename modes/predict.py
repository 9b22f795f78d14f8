"""--mode=predict: classify image files with a work dir's checkpoint.

The checkpoint is chosen as --mode=eval chooses it (eval.checkpoint: latest,
best or a step; eval.weights: raw or the moving average), each image gets
the evaluation view of the run's data source, and the class names come
from the work dir's classes.json (folder data). Like --mode=eval it writes
nothing into the work dir, so it may run beside the training that owns it.
"""

import functools
import json
import os

from absl import logging
import jax
import numpy as np

from configs import values
from coordination import preemption
from core import atomic
from core.errors import UsageError
from input_pipeline import single_images
from modes import eval as eval_mode
from trainer import checkpointing
from trainer import experiment
from trainer import input_wait
from trainer import step_functions


def class_names(workdir: str) -> list[str] | None:
  """The run's class names by label (classes.json), or None."""
  path = os.path.join(workdir, experiment.CLASS_MAP_FILE_NAME)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    class_map = json.load(f)
  return [name for name, _ in sorted(class_map.items(), key=lambda item: item[1])]


def saved_num_classes(directory: str, step: int) -> int:
  """The classifier's width in checkpoint `step` (its head's bias)."""
  saved = checkpointing.saved_leaves(directory, step)
  heads = [leaf.shape[-1] for path, leaf in saved.items()
           if path.startswith('params/') and path.endswith('/head/bias')]
  if len(heads) != 1:
    raise UsageError(f'checkpoint {step} in {directory}: cannot tell its number of '
                     'classes; set model.num_classes')
  return int(heads[0])


def top_k(probabilities: np.ndarray, k: int, names: list[str] | None) -> list[dict]:
  """The k most probable classes of one image, most probable first."""
  order = np.argsort(-probabilities, kind='stable')[:k]
  return [{'class': int(c), 'name': names[c] if names else None,
           'probability': float(probabilities[c])} for c in order]


def run_predict(config, workdir: str) -> dict:
  """Prints one JSON line per readable image ({"file", "top_k": [{"class",
  "name", "probability"}, ...]}), also to predict.output when set; returns
  the summary."""
  if jax.process_count() > 1:
    raise UsageError('--mode=predict runs as one process; start it without '
                     'launch.py or srun')
  paths = single_images.list_inputs(config.predict.inputs)
  choice = values.eval_checkpoint(config.eval.checkpoint)
  directory, step = eval_mode.choose_checkpoint(workdir, choice,
                                               checkpointing.all_steps(workdir))
  names = class_names(workdir)
  num_classes = (len(names) if names else config.model.num_classes
                 or saved_num_classes(directory, step))
  exp = experiment.build_without_data(config, num_classes)
  state = eval_mode.restore_chosen_weights(config, directory, step, exp.abstract_state)
  forward = jax.jit(functools.partial(step_functions.predict_step, model=exp.model))
  # Every batch is padded to one size that the batch-sharded devices divide:
  # one compiled program.
  devices = jax.device_count()
  batch_size = -(-(config.eval.batch_size or config.batch_size) // devices) * devices
  k = min(config.predict.top_k, num_classes)

  lines, unreadable = [], []
  preemption.during_prediction()
  with exp.tracing_context():
    # Waited for in slices as training waits (trainer/input_wait.py): an
    # unreadable mount ends the run with exit 69 instead of holding it.
    read = input_wait.WaitedStream(
        single_images.batches(paths, config.data, batch_size),
        f'predict input (predict.inputs, {len(paths)} '
        f'{"image" if len(paths) == 1 else "images"})',
        config.data.stall_timeout_s)
    for files, images, skipped in read:
      for name in skipped:
        logging.warning('Unreadable image, skipped: %s', name)
      unreadable += skipped
      if not files:
        continue
      size = config.data.image_size
      padded = np.zeros((batch_size, size, size, 3), np.uint8)
      padded[:len(files)] = images
      probabilities = np.asarray(forward(
          state, jax.device_put(padded, exp.batch_sharding)))[:len(files)]
      for file, p in zip(files, probabilities):
        line = json.dumps({'file': file, 'top_k': top_k(p, k, names)})
        print(line, flush=True)
        lines.append(line)
  if not lines:
    raise UsageError(f'predict.inputs: none of the {len(paths)} images could be read')
  if config.predict.output:
    atomic.write_bytes(os.path.expanduser(config.predict.output),
                       ''.join(l + '\n' for l in lines).encode())
  logging.info('Classified %d images with checkpoint %d (%s weights)%s%s', len(lines),
               step, config.eval.weights,
               f'; {len(unreadable)} unreadable, skipped' if unreadable else '',
               f'; written to {config.predict.output}' if config.predict.output else '')
  return {'step': step, 'weights': config.eval.weights, 'num_images': len(lines),
          'num_unreadable': len(unreadable)}
