"""What training and evaluation share: mesh, data, model, optimiser, state layout."""

import contextlib
import dataclasses
import math
import os
from typing import Any, Callable

from flax import linen as nn
import jax
import ml_collections
import optax

from configs.values import SEED_RANGE, at_least
from core.errors import UsageError
from input_pipeline import create_dataset, PairedDataset
from models import registry
from trainer import eval_data
from trainer import mesh as mesh_lib
from trainer import optim
from trainer import state as state_lib

CLASS_MAP_FILE_NAME = 'classes.json'


def check_config(config: ml_collections.ConfigDict) -> None:
  """How long training runs, on what batches, from which seed; UsageError
  with one line."""
  at_least('batch_size', config.batch_size, 1)
  at_least('num_train_steps', config.num_train_steps, 0)
  at_least('num_epochs', config.num_epochs, 0.0)
  if config.num_train_steps == 0 and not config.num_epochs > 0:
    raise UsageError(f'num_epochs={config.num_epochs!r} must be > 0 '
                     'when num_train_steps is 0')
  if not SEED_RANGE[0] <= config.seed <= SEED_RANGE[1]:
    raise UsageError(f'seed={config.seed} must be in [{SEED_RANGE[0]}, '
                     f'{SEED_RANGE[1]}] (a 32-bit seed)')
  at_least('grad_accum_steps', config.grad_accum_steps, 1)


@dataclasses.dataclass
class Experiment:
  """The pieces a run is made of, built once from the config."""
  config: ml_collections.ConfigDict
  mesh: jax.sharding.Mesh
  rules: tuple
  dataset: Any
  model: nn.Module
  tx: optax.GradientTransformation
  learning_rate_fn: Callable
  steps_per_epoch: int
  total_steps: int
  state_shardings: Any
  abstract_state: state_lib.TrainState

  @property
  def batch_sharding(self):
    return mesh_lib.batch_sharding(self.mesh)

  @contextlib.contextmanager
  def tracing_context(self):
    """Mesh and logical rules that the models' activation constraints need."""
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      yield


def training_length(config, num_train_examples: int) -> tuple[int, int]:
  """(steps per epoch, total steps); num_train_steps wins when > 0."""
  steps_per_epoch = max(num_train_examples // config.batch_size, 1)
  if config.num_train_steps > 0:
    return steps_per_epoch, config.num_train_steps
  return steps_per_epoch, max(int(math.ceil(config.num_epochs * steps_per_epoch)), 1)


def conv_form(config) -> str:
  """model.conv_form with 'auto' resolved for the platform at hand: XLA's
  convolution wins on GPUs and TPUs, the patches on CPU (models/conv_forms.py)."""
  if config.model.conv_form != 'auto':
    return config.model.conv_form
  return 'by_shape' if jax.default_backend() == 'cpu' else 'xla'


def create_model(config, num_classes: int) -> nn.Module:
  # Only the models that have them take the regularisation fields
  # (validation refuses them for the others).
  regularisation = {key: config.model[key] for key in ('drop_path_rate', 'dropout_rate')
                    if config.model[key]}
  if config.model.gelu != 'tanh':  # ViT only (validation refuses it for the others)
    regularisation['gelu'] = config.model.gelu
  return registry.create_model(
      config.model.name, num_classes=num_classes, dtype=config.model.dtype,
      width=config.model.width, depth=config.model.depth, remat=config.model.remat,
      bn_group_size=config.model.bn_group_size,
      image_size=config.data.image_size, conv_form=conv_form(config), **regularisation)


def resolve_num_classes(config, dataset) -> int:
  """The data decides the number of classes; a config that disagrees is an error."""
  wanted = config.model.num_classes
  if dataset.num_classes == 1:
    # A classifier of one class is always right: "100% top-1", and nothing
    # learnt. Always a mistake in the data's layout.
    raise UsageError(f'data.dir={config.data.dir}: the data has one class; a '
                     'classifier needs at least two (one sub-folder of images per '
                     'class)')
  if wanted and dataset.num_classes and wanted != dataset.num_classes:
    raise UsageError(f'model.num_classes={wanted} but the data has '
                     f'{dataset.num_classes} classes; set it to 0 (from the '
                     f'data) or {dataset.num_classes}')
  return dataset.num_classes or wanted


def create_experiment_dataset(config, workdir: str, *, eval_only: bool = False):
  """The run's Dataset: training data, and evaluation data per eval.*.

  eval_only (--mode=eval): with eval data of its own, the training data is
  not opened at all, so a machine that holds only the evaluation set can
  evaluate.
  """
  # A saved class map fixes the labels of this work dir; a new one is written
  # by the trainer only once every check has passed (see train.py).
  class_map_path = os.path.join(workdir, CLASS_MAP_FILE_NAME)
  common = dict(
      batch_size=config.batch_size,
      eval_batch_size=config.eval.batch_size or config.batch_size,
      seed=config.seed, process_index=jax.process_index(),
      process_count=jax.process_count(),
      class_map_path=class_map_path if os.path.exists(class_map_path) else None)
  eval_config = eval_data.eval_data_config(config)
  if eval_config is not None and eval_only:
    return create_dataset(eval_config, **common)
  dataset = create_dataset(config.data, **common)
  if eval_config is None:
    return dataset
  name = f'{eval_config.name or eval_config.dir} ({eval_config.eval_split})'
  return PairedDataset(dataset, create_dataset(eval_config, **common), eval_name=name)


def build_experiment(config: ml_collections.ConfigDict, workdir: str, *,
                     eval_only: bool = False) -> Experiment:
  dataset = create_experiment_dataset(config, workdir, eval_only=eval_only)
  steps_per_epoch, total_steps = training_length(config, dataset.num_train_examples)
  return build_without_data(config, resolve_num_classes(config, dataset), dataset,
                            steps_per_epoch, total_steps)


def build_without_data(config: ml_collections.ConfigDict, num_classes: int, dataset=None,
                       steps_per_epoch: int = 1, total_steps: int = 1) -> Experiment:
  """The mesh, model, optimiser and state layout, for `dataset` or for none
  (--mode=predict: the state's layout is what a restore needs, and it does
  not depend on the schedule's length)."""
  mesh = mesh_lib.create_mesh(config.mesh)
  rules = mesh_lib.logical_axis_rules(config)
  model = create_model(config, num_classes)
  learning_rate_fn = optim.create_learning_rate_fn(config, steps_per_epoch, total_steps)
  tx = optim.create_optimizer(config, learning_rate_fn)
  shardings = state_lib.state_shardings(
      model, tx, config.data.image_size, mesh, rules,
      shard_update=config.mesh.shard_update and config.engine == 'spmd')
  abstract = state_lib.abstract_state(model, tx, config.data.image_size, shardings)
  return Experiment(config=config, mesh=mesh, rules=rules, dataset=dataset,
                    model=model, tx=tx, learning_rate_fn=learning_rate_fn,
                    steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                    state_shardings=shardings, abstract_state=abstract)
