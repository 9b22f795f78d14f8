"""--mode=export: a work dir's checkpoint as a TensorFlow SavedModel, or its
weights in a published layout (export.format).

The checkpoint is chosen as --mode=eval and --mode=predict choose it
(eval.checkpoint: latest, best or a step; eval.weights: raw or the moving
average). The model is converted with jax2tf, which embeds the inference
function as StableHLO in TensorFlow's XlaCallModule op (jax.export under the
hood, the route jax2tf supports today), lowered for the CPU in float32: batch
norm reads its running statistics, dropout and stochastic depth are off. The
weights are TensorFlow variables of the SavedModel, not constants of its
graph, so large models stay within the protocol buffer's 2 GiB.

The export takes uint8 RGB images [N, S, S, 3] already in the evaluation view
(the crop or resize of the run's data source) and returns float32 logits
[N, classes]. The normalisation by mean and std is inside, so a client only
decodes and resizes; the view itself is described in export.json next to the
SavedModel, because a decoder and resizer belong to the client's own stack.

export.format=big_vision writes the weights as the AugReg ViTs' `.npz`
(`weights.npz`), export.format=timm as timm's `model.safetensors`
(models/published/); other tools load them as they load the published
ones, and init.from_weights reads them back bit for bit
(docs/published-weights.md).

The directory is written under a temporary name beside its destination and
renamed when complete; an existing destination is refused, never replaced.
"""

import json
import os
import shutil
import uuid

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from configs import values
from core.errors import UsageError
from modes import eval as eval_mode
from models.published import big_vision
from models.published import timm
from modes import predict
from trainer import checkpointing
from trainer import experiment
from trainer import step_functions
from trainer import tree_paths

SIGNATURE = 'serving_default'
INPUT_NAME = 'images'
OUTPUT_NAME = 'logits'
METADATA_FILE_NAME = 'export.json'
EXPORT_SUBDIR = 'export'
# export.format -> (the file in the export directory, the layout's writer).
WEIGHT_FILES = {'big_vision': ('weights.npz', big_vision.from_ours),
                'timm': ('model.safetensors', timm.from_ours)}
# XLA's CPU backend: the op runs wherever TensorFlow runs on a CPU, with no
# accelerator needed on the serving side.
PLATFORMS = ('cpu',)


def destination(config, workdir: str, step: int) -> str:
  """The export directory: export.dir, or WORKDIR/export/step_N (step_N_ema
  for the moving average), checked not to exist."""
  path = config.export.dir or os.path.join(
      workdir, EXPORT_SUBDIR,
      f'step_{step}' + ('_ema' if config.eval.weights == 'ema' else '') +
      ('' if config.export.format == 'saved_model' else f'_{config.export.format}'))
  if '://' in path:
    raise UsageError(f'export.dir={path}: a local directory is expected '
                     '(copy the export to remote storage afterwards)')
  path = os.path.abspath(os.path.expanduser(path))
  if os.path.lexists(path):
    raise UsageError(f'export.dir={path} exists; remove it or set export.dir to '
                     'a new directory')
  return path


def inference_model(config, num_classes: int):
  """The run's model as its evaluation runs it, in float32, with the
  convolutions' CPU form (the same parameters and results whatever the form,
  models/conv_forms.py) and no rematerialisation (there is no backward pass)."""
  config = config.copy_and_resolve_references()
  config.model.dtype = 'float32'
  config.model.remat = 'none'
  if config.model.conv_form == 'auto':
    config.model.conv_form = 'by_shape'  # what 'auto' is on a CPU
  return experiment.create_model(config, num_classes)


def logits_fn(model):
  """(variables, uint8 images) -> float32 logits, as evaluation computes them."""
  def logits(variables, images):
    out = model.apply(variables, step_functions.normalize_images(images), train=False)
    return out.astype(jnp.float32)
  return logits


def model_variables(state) -> dict:
  """{'params', 'batch_stats'} of a restored state as host arrays; without
  'batch_stats' for models that have none (ViT)."""
  variables = {'params': state.params}
  if jax.tree.leaves(state.batch_stats):
    variables['batch_stats'] = state.batch_stats
  return jax.tree.map(lambda a: np.asarray(a, np.float32), jax.device_get(variables))


def write_saved_model(path: str, model, variables: dict, image_size: int) -> None:
  """The SavedModel of `model` with `variables` into directory `path`: one
  signature, uint8 images [N, S, S, 3] -> float32 logits [N, classes]."""
  # pylint: disable=g-import-not-at-top
  from input_pipeline.tf_setup import tf  # TensorFlow quiet and off the GPUs
  from jax.experimental import jax2tf
  # pylint: enable=g-import-not-at-top
  converted = jax2tf.convert(
      logits_fn(model), polymorphic_shapes=[None, f'(batch, {image_size}, {image_size}, 3)'],
      with_gradient=False, native_serialization_platforms=PLATFORMS)
  module = tf.Module()
  # Tracked by the module, so the SavedModel stores them as its variables.
  module.model_variables = tf.nest.map_structure(
      lambda a: tf.Variable(a, trainable=False), variables)

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None, image_size, image_size, 3], tf.uint8, name=INPUT_NAME)])
  def serve(images):
    return {OUTPUT_NAME: converted(module.model_variables, images)}

  module.serve = serve
  tf.saved_model.save(module, path, signatures={SIGNATURE: serve})


def write_weights(path: str, export_format: str, variables: dict) -> str:
  """The variables in export_format's published layout, as its file in
  directory `path`; returns the file's name."""
  name, from_ours = WEIGHT_FILES[export_format]
  tensors = from_ours(tree_paths.leaves_by_path(variables))
  if export_format == 'timm':
    from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
    safetensors_numpy.save_file(tensors, os.path.join(path, name))
  else:
    np.savez(os.path.join(path, name), **tensors)
  return name


def preprocessing(data, inside: bool = True) -> dict:
  """How an image becomes the export's input: the evaluation view of
  data.source (input_pipeline/single_images.py: eval_view) and the
  normalisation, which a SavedModel applies itself (`inside`) and weights
  in a published layout expect done."""
  if data.source == 'tfds':
    view = {'view': 'center_crop', 'crop_fraction': data.eval_crop_fraction,
            'resize': ('the centred square of side crop_fraction * shorter side, '
                       'resized bilinearly (half-pixel centres) and truncated to uint8')}
  else:
    view = {'view': 'resize',
            'resize': ('the whole image resized bilinearly with antialiasing, '
                       'rounded to uint8')}
  return {
      'image_size': data.image_size, 'keeps_aspect_ratio': False, **view,
      'channels': 'RGB', 'dtype': 'uint8',
      'normalization': ('inside the export: ' if inside else 'before the model: ') +
                       '(image - mean_rgb) / std_rgb on 0-255 values',
      'mean_rgb': [round(float(v), 4) for v in step_functions.RGB_MEAN],
      'std_rgb': [round(float(v), 4) for v in step_functions.RGB_STD],
  }


def metadata(config, *, num_classes: int, names: list[str] | None,
             directory: str, step: int) -> dict:
  """export.json: what the SavedModel takes and returns, and where it came from."""
  from input_pipeline.tf_setup import tf  # pylint: disable=g-import-not-at-top
  size = config.data.image_size
  if config.export.format != 'saved_model':
    return {'format': config.export.format, 'file': WEIGHT_FILES[config.export.format][0],
            'num_classes': num_classes, 'class_names': names,
            'model': {'name': config.model.name, 'width': config.model.width,
                      'depth': config.model.depth, 'gelu': config.model.gelu},
            'preprocessing': preprocessing(config.data, inside=False),
            'checkpoint': {'directory': directory, 'step': step,
                           'weights': config.eval.weights}}
  return {
      'format': 'tf_saved_model',
      'signature': SIGNATURE,
      'inputs': {INPUT_NAME: {'dtype': 'uint8', 'shape': [None, size, size, 3]}},
      'outputs': {OUTPUT_NAME: {'dtype': 'float32', 'shape': [None, num_classes]}},
      'preprocessing': preprocessing(config.data),
      'num_classes': num_classes,
      'class_names': names,
      'model': {'name': config.model.name, 'width': config.model.width,
                'depth': config.model.depth, 'dtype': 'float32'},
      'checkpoint': {'directory': directory, 'step': step,
                     'weights': config.eval.weights},
      'platforms': list(PLATFORMS),
      'versions': {'jax': jax.__version__, 'tensorflow': tf.__version__},
  }


def run_export(config, workdir: str) -> dict:
  """Writes the chosen checkpoint as a SavedModel (or its weights in
  export.format's layout) with its export.json; returns {'export_dir',
  'step', 'weights'}."""
  if jax.process_count() > 1:
    raise UsageError('--mode=export runs as one process; start it without '
                     'launch.py or srun')
  choice = values.eval_checkpoint(config.eval.checkpoint)
  directory, step = eval_mode.choose_checkpoint(workdir, choice,
                                               checkpointing.all_steps(workdir))
  path = destination(config, workdir, step)
  names = predict.class_names(workdir)
  num_classes = (len(names) if names else config.model.num_classes
                 or predict.saved_num_classes(directory, step))
  exp = experiment.build_without_data(config, num_classes)
  state = eval_mode.restore_chosen_weights(config, directory, step, exp.abstract_state)
  variables = model_variables(state)
  parent = os.path.dirname(path)
  try:
    os.makedirs(parent, exist_ok=True)
    # Beside the destination, so that the rename stays on one file system;
    # os.mkdir leaves the permissions to the umask, as for any new directory.
    temporary = os.path.join(parent, f'.{os.path.basename(path)}.tmp-{uuid.uuid4().hex}')
    os.mkdir(temporary)
  except OSError as e:
    raise UsageError(f'export.dir={path}: cannot write there ({e.strerror})') from None
  try:
    if config.export.format == 'saved_model':
      write_saved_model(temporary, inference_model(config, num_classes), variables,
                        config.data.image_size)
    else:
      write_weights(temporary, config.export.format, variables)
    info = metadata(config, num_classes=num_classes, names=names,
                    directory=directory, step=step)
    with open(os.path.join(temporary, METADATA_FILE_NAME), 'w', encoding='utf-8') as f:
      json.dump(info, f, indent=2)
      f.write('\n')
    if os.path.lexists(path):  # appeared while this export was written
      raise UsageError(f'export.dir={path} appeared during the export; '
                       'nothing was replaced')
    os.rename(temporary, path)
  except BaseException:
    shutil.rmtree(temporary, ignore_errors=True)
    raise
  logging.info('Exported checkpoint %d (%s weights) of %s to %s', step,
               config.eval.weights, directory, path)
  return {'export_dir': path, 'step': step, 'weights': config.eval.weights}
