"""Checks a config for values that cannot work, before anything heavy runs.

`check_config` needs no devices; `check_against_devices` runs once the runtime
knows how many devices and processes there are. Both raise UsageError with one
line that names the key and what is accepted.
"""

import math

import ml_collections

from configs import schema
from core.errors import UsageError
from trainer import engines
from trainer.engines import allreduce
from trainer.validation_augment import check_augmentation

MESH_AXES = ('data', 'fsdp', 'tensor')
OPTIMIZERS = ('sgd', 'adamw', 'lars', 'lamb')
LR_SCALINGS = ('linear', 'none')
LR_SCHEDULES = ('cosine', 'constant', 'step', 'poly')
EVAL_WEIGHTS = ('raw', 'ema')  # eval.weights
# plan.allreduce_algorithms and study.allreduce_algorithms: the engine's own.
ALLREDUCE_ALGORITHMS = allreduce.ALGORITHMS
PS_PLACEMENTS = ('dedicated', 'colocated')  # plan.ps_placement
PLAN_TARGETS = ('cluster', 'here')  # plan.target
BENCH_DATA = ('synthetic', 'real')  # bench.data
NONFINITE = ('stop', 'skip')
CLUSTERS = ('auto', 'slurm', 'ompi', 'none')
# Seeds are 32-bit: JAX's keys take the seed modulo 2**32 without x64, so two
# seeds further apart would start from the same parameters.
SEED_RANGE = (0, 2**32 - 1)
_MAX_STEP_DIGITS = 18  # below 2**63: a step is an int64


def _one_of(key: str, value, accepted) -> None:
  if value not in accepted:
    raise UsageError(f'{key}={value!r} is not accepted; use one of: '
                     f'{", ".join(map(str, accepted))}')


def _at_least(key: str, value, minimum) -> None:
  if value < minimum:
    raise UsageError(f'{key}={value!r} must be >= {minimum}')


def profile_steps(text: str) -> tuple[int, int] | None:
  """profile_steps 'A,B' -> (A, B) with 1 <= A < B; '' -> None."""
  if not text:
    return None
  parts = text.split(',')
  try:
    first, end = (int(p) for p in parts)
  except ValueError:
    first = end = None
  if first is None or not 1 <= first < end:
    raise UsageError(f'profile_steps={text!r}: expected FIRST,END with '
                     '1 <= FIRST < END (steps FIRST..END-1 are traced)')
  return first, end


def eval_checkpoint(text: str) -> str | int:
  """eval.checkpoint: 'latest', 'best' or a step number (int)."""
  if text in ('latest', 'best'):
    return text
  # ASCII digits only: int() would also take other scripts' digits, and
  # 4300 digits or more not at all.
  if text.isascii() and text.isdigit() and len(text) <= _MAX_STEP_DIGITS:
    return int(text)
  raise UsageError(f'eval.checkpoint={text!r} is not accepted; use latest, best '
                   'or a step number')


def check_config(config: ml_collections.ConfigDict) -> None:
  """Value checks that need neither devices nor data (input_pipeline checks
  config.data itself)."""
  _check_model(config)
  _check_length_and_batch(config)
  _check_optimizer(config)
  check_augmentation(config)
  _check_parallelism(config)
  _check_plan_and_study(config)
  _check_faults_and_init(config)
  _check_cadences(config)
  _check_evaluation(config)
  _check_runtime(config)


def _check_model(config: ml_collections.ConfigDict) -> None:
  # The accepted values come from models/ itself, so they cannot drift.
  from models import conv_forms, registry, remat  # pylint: disable=g-import-not-at-top
  model = config.model
  _one_of('model.name', model.name, registry.MODEL_NAMES)
  _one_of('model.dtype', model.dtype, registry.DTYPES)
  _one_of('model.remat', model.remat, remat.MODES)
  _one_of('model.conv_form', model.conv_form, ('auto',) + conv_forms.FORMS)
  _at_least('model.num_classes', model.num_classes, 0)
  _at_least('model.width', model.width, 0)
  _at_least('model.depth', model.depth, 0)
  for key in ('drop_path_rate', 'dropout_rate'):
    if not math.isfinite(model[key]) or not 0 <= model[key] < 1:
      raise UsageError(f'model.{key}={model[key]!r} must be in [0, 1) (0: off)')
  if model.drop_path_rate and not registry.has_residual_blocks(model.name):
    raise UsageError(f'model.drop_path_rate={model.drop_path_rate!r}: stochastic depth '
                     f'is for ResNet and ViT models; {model.name} has no residual '
                     f'blocks, use 0')
  if model.dropout_rate and not registry.is_vit(model.name):
    raise UsageError(f'model.dropout_rate={model.dropout_rate!r}: dropout is for ViT '
                     f'models; use 0 with {model.name}')
  if model.depth and not registry.is_vit(model.name):
    raise UsageError(f'model.depth={model.depth}: only ViT models take '
                     f'a depth; {model.name} has its depth in its name')
  _at_least('model.bn_group_size', model.bn_group_size, 0)
  _check_model_sizes('model.width', model.name, model.width,
                     config.data.image_size)


def _check_model_sizes(width_key: str, name: str, width: int,
                       image_size: int) -> None:
  """The model's own rules on its width and image size (models/registry.py)."""
  if image_size <= 0:
    return  # the data check refuses it, in its own words
  from models import registry  # pylint: disable=g-import-not-at-top
  problems = registry.size_problems(name, width=width, image_size=image_size)
  keys = {'width': f'{width_key}={width}', 'image_size': f'data.image_size={image_size}'}
  if problems:
    argument, problem = next(iter(problems.items()))
    raise UsageError(f'{keys[argument]} does not fit {name}: {problem}')


def _check_length_and_batch(config: ml_collections.ConfigDict) -> None:
  """How long training runs, on what batches, from which seed."""
  _at_least('batch_size', config.batch_size, 1)
  _at_least('bench.steps', config.bench.steps, 1)
  _at_least('bench.warmup_steps', config.bench.warmup_steps, 0)
  _one_of('bench.data', config.bench.data, BENCH_DATA)
  if config.bench.data == 'real' and config.data.source == 'synthetic':
    raise UsageError("bench.data='real' times the input pipeline of "
                     "data.source, and data.source='synthetic' has none: set "
                     'data.source (folder, tfds, shapes)')
  profile_steps(config.profile_steps)
  _at_least('num_train_steps', config.num_train_steps, 0)
  _at_least('num_epochs', config.num_epochs, 0.0)
  if config.num_train_steps == 0 and not config.num_epochs > 0:
    raise UsageError(f'num_epochs={config.num_epochs!r} must be > 0 '
                     'when num_train_steps is 0')
  if not SEED_RANGE[0] <= config.seed <= SEED_RANGE[1]:
    raise UsageError(f'seed={config.seed} must be in [{SEED_RANGE[0]}, '
                     f'{SEED_RANGE[1]}] (a 32-bit seed)')
  _at_least('grad_accum_steps', config.grad_accum_steps, 1)


def _check_optimizer(config: ml_collections.ConfigDict) -> None:
  _one_of('optimizer', config.optimizer, OPTIMIZERS)
  for key in ('learning_rate', 'weight_decay', 'warmup_epochs', 'momentum',
              'grad_clip_norm'):
    value = config[key]
    if not math.isfinite(value) or value < 0:
      raise UsageError(f'{key}={value!r} must be a finite number >= 0')
  _at_least('warmup_steps', config.warmup_steps, 0)
  _one_of('lr_scaling', config.lr_scaling, LR_SCALINGS)
  _one_of('lr_schedule', config.lr_schedule, LR_SCHEDULES)
  if not 0.0 <= config.label_smoothing < 1.0:
    raise UsageError(f'label_smoothing={config.label_smoothing!r} must be in [0, 1)')
  if not math.isfinite(config.mixup_alpha) or config.mixup_alpha < 0:
    raise UsageError(f'mixup_alpha={config.mixup_alpha!r} must be >= 0 (0: off)')
  if not 0.0 <= config.momentum < 1.0:
    raise UsageError(f'momentum={config.momentum!r} must be in [0, 1)')
  _one_of('nonfinite', config.nonfinite, NONFINITE)
  _check_large_batch_keys(config)


def _check_large_batch_keys(config: ml_collections.ConfigDict) -> None:
  """The step schedule, LARS's trust coefficient and layer-wise decay."""
  from models import registry  # pylint: disable=g-import-not-at-top
  try:
    epochs = parse_step_epochs(config.lr_step_epochs)
  except ValueError:
    epochs = None
  if epochs is None or any(not math.isfinite(e) or e <= 0 for e in epochs) or \
      epochs != sorted(set(epochs)):
    raise UsageError(f'lr_step_epochs={config.lr_step_epochs!r} must be increasing '
                     f'epochs > 0, comma-separated (e.g. 30,60,80)')
  if not math.isfinite(config.lr_step_factor) or not 0 < config.lr_step_factor <= 1:
    raise UsageError(f'lr_step_factor={config.lr_step_factor!r} must be in (0, 1]')
  if not math.isfinite(config.lr_poly_power) or config.lr_poly_power <= 0:
    raise UsageError(f'lr_poly_power={config.lr_poly_power!r} must be a finite number > 0')
  if not math.isfinite(config.trust_coefficient) or config.trust_coefficient <= 0:
    raise UsageError(f'trust_coefficient={config.trust_coefficient!r} must be a '
                     f'finite number > 0')
  if not math.isfinite(config.layer_decay) or not 0 < config.layer_decay <= 1:
    raise UsageError(f'layer_decay={config.layer_decay!r} must be in (0, 1] (1: off)')
  if config.layer_decay != 1 and not registry.is_vit(config.model.name):
    raise UsageError(f'layer_decay={config.layer_decay!r}: layer-wise decay is for '
                     f'ViT models (their encoder blocks); model.name={config.model.name} '
                     f'has none, use layer_decay=1')


def parse_step_epochs(text: str) -> list[float]:
  """lr_step_epochs as numbers (ValueError when one is not)."""
  return [float(e) for e in text.split(',') if e.strip()]


def _check_parallelism(config: ml_collections.ConfigDict) -> None:
  """The mesh, the sharding rules and the engine."""
  sizes = [config.mesh[axis] for axis in MESH_AXES]
  for axis, size in zip(MESH_AXES, sizes):
    if size == 0 or size < -1:
      raise UsageError(f'mesh.{axis}={size} must be a positive size or -1 '
                       '(fill the remaining devices)')
  if sizes.count(-1) > 1:
    raise UsageError('mesh: at most one axis may be -1, got '
                     + ', '.join(f'{a}={s}' for a, s in zip(MESH_AXES, sizes)))
  for rule in config.sharding_rules:
    if not (isinstance(rule, tuple) and len(rule) == 2 and
            all(isinstance(part, str) for part in rule)):
      raise UsageError(f'sharding_rules: {schema.shown(rule)} must be a pair '
                       "('logical_axis', 'mesh_axis[,mesh_axis]' or '')")
    for axis in filter(None, rule[1].split(',')):
      _one_of(f'sharding_rules[{rule[0]}]', axis, MESH_AXES)
  _one_of('engine', config.engine, engines.names())
  # Every engine's sections are checked whatever the engine (the planner and
  # the study read them); the configured engine checks the rest it needs.
  for name in engines.names():
    engines.package(name).check_section(config)
  engines.package(config.engine).check_config(config)


def _check_faults_and_init(config: ml_collections.ConfigDict) -> None:
  """Fault injection and the run to start from."""
  _at_least('debug.nan_at_step', config.debug.nan_at_step, -1)
  _at_least('debug.pause_at_step', config.debug.pause_at_step, -1)
  _at_least('init.checkpoint_step', config.init.checkpoint_step, -1)
  # Whether init.from_workdir exists is for the trainer to check: only a run
  # without a checkpoint of its own reads it (trainer/init_from.py).


def _check_cadences(config: ml_collections.ConfigDict) -> None:
  _at_least('log_every_steps', config.log_every_steps, 1)
  _at_least('eval_every_steps', config.eval_every_steps, 0)
  _at_least('checkpoint.every_steps', config.checkpoint.every_steps, 1)
  _at_least('checkpoint.every_minutes', config.checkpoint.every_minutes, 0.0)
  _at_least('checkpoint.keep', config.checkpoint.keep, 1)


def _check_evaluation(config: ml_collections.ConfigDict) -> None:
  eval_checkpoint(config.eval.checkpoint)
  if config.eval.dataset and config.data.source != 'tfds':
    raise UsageError(f'eval.dataset={config.eval.dataset!r} names a tfds data set, '
                     f"but data.source={config.data.source!r}; for folder data "
                     'set eval.data_dir (and eval.split) instead')
  _at_least('eval.batch_size', config.eval.batch_size, 0)
  _one_of('eval.weights', config.eval.weights, EVAL_WEIGHTS)
  _at_least('predict.top_k', config.predict.top_k, 1)
  if not math.isfinite(config.ema_decay) or not 0 <= config.ema_decay < 1:
    raise UsageError(f'ema_decay={config.ema_decay!r} must be in [0, 1) (0: no moving '
                     f'average)')
  if config.eval.weights == 'ema' and not config.ema_decay:
    raise UsageError("eval.weights='ema': this run keeps no moving average of its "
                     'weights (ema_decay=0); train with ema_decay > 0, or use raw')


def _check_runtime(config: ml_collections.ConfigDict) -> None:
  _at_least('runtime.num_cpu_devices', config.runtime.num_cpu_devices, 0)
  _at_least('runtime.device_memory_gib', config.runtime.device_memory_gib, 0.0)
  _one_of('runtime.cluster', config.runtime.cluster, CLUSTERS)
  _at_least('runtime.init_timeout_s', config.runtime.init_timeout_s, 1)
  _at_least('runtime.heartbeat_timeout_s', config.runtime.heartbeat_timeout_s, 1)
  _at_least('runtime.agree_every_steps', config.runtime.agree_every_steps, 1)


def ignored_engine_keys(config: ml_collections.ConfigDict) -> list[str]:
  """The keys of engines other than the configured one (their
  CONFIG_SECTIONS) set away from their defaults in a run that trains or
  benchmarks, where they do nothing (the planner and the study read them
  whatever the engine)."""
  from configs import default  # pylint: disable=g-import-not-at-top
  defaults = default.get_config()
  used = engines.package(config.engine).CONFIG_SECTIONS
  sections = {s for n in engines.names() for s in engines.package(n).CONFIG_SECTIONS}
  ignored = []
  for section in sorted(sections):
    if section in used:
      continue
    ignored += [f'{section}.{key}' for key in sorted(config[section])
                if config[section][key] != defaults[section][key]]
  return ignored



def parse_list(key: str, text: str, kind=int) -> list:
  """'1,2,4' -> [1, 2, 4]; UsageError naming `key` for an empty or bad list."""
  try:
    values = [kind(x) for x in text.split(',') if x.strip()]
  except ValueError:
    values = None
  if not values:
    raise UsageError(f'{key}={text!r} must be a comma-separated list of values')
  return values


def parse_names(key: str, text: str, accepted, what: str) -> list[str]:
  """'a, b' -> ['a', 'b'], each one of `accepted`; UsageError naming `key`
  for an empty list (naming no `what`) or a name not accepted."""
  names = [n.strip() for n in text.split(',') if n.strip()]
  if not names:
    raise UsageError(f'{key}={text!r} names no {what}; use some of: '
                     f'{", ".join(accepted)}')
  for name in names:
    _one_of(key, name, accepted)
  return names


def _check_plan_and_study(config: ml_collections.ConfigDict) -> None:
  plan, study = config.plan, config.study
  if any(b < 1 for b in parse_list('plan.per_worker_batch_sizes', plan.per_worker_batch_sizes)):
    raise UsageError(f'plan.per_worker_batch_sizes={plan.per_worker_batch_sizes!r}: sizes must be >= 1')
  _at_least('plan.repeats', plan.repeats, 1)
  _at_least('plan.num_workers', plan.num_workers, 0)
  if not 0 < plan.link_bandwidth_gbps < math.inf:
    raise UsageError(f'plan.link_bandwidth_gbps={plan.link_bandwidth_gbps!r} must be a '
                     'finite number > 0 (the link of the cluster to plan for)')
  for key in ('link_latency_ms', 'compute_s', 'device_tflops'):
    if not 0 <= plan[key] < math.inf:
      raise UsageError(f'plan.{key}={plan[key]!r} must be a finite number >= 0')
  if not 0 < plan.device_utilization <= 1:
    raise UsageError(f'plan.device_utilization={plan.device_utilization!r} must be '
                     'in (0, 1]: the fraction of the device peak a step reaches')
  _one_of('plan.target', plan.target, PLAN_TARGETS)
  named_by = [k for k in ('compute_s', 'device_tflops', 'probe') if plan[k]]
  if len(named_by) > 1:
    raise UsageError(f'plan.{named_by[0]} and plan.{named_by[1]} both give the '
                     "cluster's compute time; set one of them")
  if plan.target == 'here' and named_by:
    raise UsageError(f'plan.target=here times the devices at hand, but plan.{named_by[0]} '
                     'names other devices; remove one of them')
  _check_plan_cluster(plan)
  from models import registry  # pylint: disable=g-import-not-at-top
  study_models = parse_names('study.models', study.models, registry.MODEL_NAMES, 'model')
  parse_names('study.engines', study.engines, engines.emulated_names(), 'engine')
  parse_names('study.allreduce_algorithms', study.allreduce_algorithms,
              ALLREDUCE_ALGORITHMS, 'algorithm')
  for key in ('num_workers', 'num_shards', 'global_batch_sizes', 'devices_per_host'):
    if any(v < 1 for v in parse_list(f'study.{key}', study[key])):
      raise UsageError(f'study.{key}={study[key]!r}: values must be >= 1')
  bandwidths = parse_list('study.link_bandwidths_gbps', study.link_bandwidths_gbps, float)
  if any(not 0 < b < math.inf for b in bandwidths):
    raise UsageError(f'study.link_bandwidths_gbps={study.link_bandwidths_gbps!r}: every '
                     'bandwidth must be a finite number > 0')
  _at_least('study.steps', study.steps, 1)
  _at_least('study.model_width', study.model_width, 0)
  for name in study_models:
    _check_model_sizes('study.model_width', name, study.model_width,
                       config.data.image_size)


def _check_plan_cluster(plan) -> None:
  """The hosts, links and strategies of the cluster to plan for."""
  _at_least('plan.devices_per_host', plan.devices_per_host, 1)
  if plan.num_workers and plan.num_workers % plan.devices_per_host:
    raise UsageError(f'plan.devices_per_host={plan.devices_per_host} does not divide '
                     f'plan.num_workers={plan.num_workers}: hosts hold the same number of devices')
  zero_means = {'intra_host_gbps': 'unlimited', 'intra_host_latency_ms': 'none',
                'device_memory_gib': 'as the devices at hand'}
  for key, meaning in zero_means.items():
    if not 0 <= plan[key] < math.inf:
      raise UsageError(f'plan.{key}={plan[key]!r} must be a finite number >= 0 (0: {meaning})')
  _at_least('plan.host_cores', plan.host_cores, 0)
  if not 0 < plan.host_cpu_ms_per_image < math.inf:
    raise UsageError(f'plan.host_cpu_ms_per_image={plan.host_cpu_ms_per_image!r} must be a '
                     'finite number > 0 (CPU ms per image)')
  _one_of('plan.ps_placement', plan.ps_placement, PS_PLACEMENTS)
  parse_names('plan.allreduce_algorithms', plan.allreduce_algorithms,
              ALLREDUCE_ALGORITHMS, 'algorithm')
  _at_least('plan.compute_s_batch', plan.compute_s_batch, 0)
  if plan.compute_s_batch and not plan.compute_s:
    raise UsageError(f'plan.compute_s_batch={plan.compute_s_batch} says which batch '
                     'plan.compute_s is for; set plan.compute_s too')


def resolve_mesh_shape(mesh_config, num_devices: int) -> tuple[int, ...]:
  """(data, fsdp, tensor) sizes with -1 filled; UsageError if they don't fit."""
  sizes = [mesh_config[axis] for axis in MESH_AXES]
  fixed = math.prod(s for s in sizes if s != -1)
  described = ', '.join(f'{a}={s}' for a, s in zip(MESH_AXES, sizes))
  if -1 in sizes:
    if num_devices % fixed:
      raise UsageError(f'mesh ({described}): {num_devices} devices do not '
                       f'divide by {fixed}; choose sizes whose product divides '
                       f'{num_devices}')
    sizes[sizes.index(-1)] = num_devices // fixed
  elif fixed != num_devices:
    raise UsageError(f'mesh ({described}) needs {fixed} devices but '
                     f'{num_devices} are present; make the product '
                     f'{num_devices} or set one axis to -1')
  return tuple(sizes)


def check_against_devices(config: ml_collections.ConfigDict, *,
                          num_devices: int, num_processes: int) -> None:
  """Checks that need the device and process counts."""
  data, fsdp, _ = resolve_mesh_shape(config.mesh, num_devices)
  batch_ways = data * fsdp
  for key in ('batch_size', 'eval.batch_size'):
    value = config.batch_size if key == 'batch_size' else (
        config.eval.batch_size or config.batch_size)
    if value % batch_ways:
      raise UsageError(
          f'{key}={value} does not divide over the {batch_ways} batch-sharded '
          f'devices (mesh data={data} x fsdp={fsdp}); use a multiple of '
          f'{batch_ways}')
    if value % num_processes:
      raise UsageError(f'{key}={value} does not divide over {num_processes} '
                       'processes')
  per_device = config.batch_size // batch_ways
  if per_device % config.grad_accum_steps:
    raise UsageError(
        f'grad_accum_steps={config.grad_accum_steps} does not divide the '
        f'per-device batch of {per_device} (batch_size {config.batch_size} over '
        f'{batch_ways} devices)')
  group = config.model.bn_group_size
  micro_batch = config.batch_size // config.grad_accum_steps
  if group and micro_batch % group:
    raise UsageError(f'model.bn_group_size={group} does not divide the batch '
                     f'of {micro_batch} that batch norm sees (batch_size / '
                     'grad_accum_steps)')
  engines.package(config.engine).check_against_devices(
      config, num_devices, num_processes)


def check_plan_devices_named(plan) -> None:
  """--mode=plan plans a cluster of named devices: their peak, a stated
  compute time or a probe of them; the devices at hand only when asked
  (plan.target=here). UsageError otherwise, before anything starts."""
  if plan.target == 'cluster' and not (plan.device_tflops or plan.compute_s or plan.probe):
    raise UsageError(
        "--mode=plan needs the cluster's devices: set plan.device_tflops (their "
        'peak TFLOP/s), plan.compute_s (a step time measured on one) or '
        'plan.probe (a work dir of --mode=probe on them); or plan.target=here '
        'to plan a cluster of the devices at hand')


def plan_batches(config) -> list[int]:
  """plan.per_worker_batch_sizes, increasing, less those a device cannot
  take as configured: each must split into grad_accum_steps micro-batches
  of whole batch-norm groups (model.bn_group_size). UsageError when none is
  left, naming the keys."""
  batches = sorted(set(parse_list('plan.per_worker_batch_sizes',
                                  config.plan.per_worker_batch_sizes)))
  unit = config.grad_accum_steps * (config.model.bn_group_size or 1)
  kept = [b for b in batches if b % unit == 0]
  if not kept:
    raise UsageError(
        f'plan.per_worker_batch_sizes={config.plan.per_worker_batch_sizes!r}: none is a '
        f'multiple of grad_accum_steps={config.grad_accum_steps} x model.bn_group_size='
        f'{config.model.bn_group_size or 1}; give batches of whole batch-norm groups')
  return kept

