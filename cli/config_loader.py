"""Builds the run's config: recipe or saved config.json, plus --config.KEY=VALUE.

The schema is configs/default.py. A recipe may only set keys that the schema
declares, with values of the declared type; overrides on the command line are
parsed into the declared type. Nothing here imports jax or tensorflow, so a
bad config is reported before any heavy import or any write to the work dir.
"""

import ast
import importlib.util
import json
import os
from typing import Any

import ml_collections

from cli.errors import UsageError
from configs import default as default_config

CONFIG_FILE_NAME = 'config.json'

# What may differ between runs in one work dir (ARCHITECTURE.md): the length of
# training, cadences, the mesh and device count, the engine (where parameters
# live and how gradients meet), evaluation settings, where the data lives,
# host-side performance knobs, and init.* (read only to start a run: once the
# work dir has a checkpoint it is ignored, so it may be cleared when the
# source run is gone). Everything else decides what the checkpoints mean and
# must match.
MUTABLE_KEY_PREFIXES = (
    'num_train_steps', 'num_epochs', 'log_every_steps', 'eval_every_steps',
    'checkpoint.', 'mesh.', 'eval.', 'runtime.', 'debug.', 'nonfinite',
    'engine', 'ps.', 'model.bn_group_size', 'model.conv_form', 'bench.',
    'profile_steps',
    'data.dir', 'data.manual_dir', 'data.prefetch_batches',
    'init.',
)


def flatten(config: ml_collections.ConfigDict, prefix: str = '') -> dict[str, Any]:
  """{'a.b': value} for every leaf of a (nested) ConfigDict."""
  flat = {}
  for key, value in config.items():
    name = f'{prefix}{key}'
    if isinstance(value, ml_collections.ConfigDict):
      flat.update(flatten(value, name + '.'))
    else:
      flat[name] = value
  return flat


def _set(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
  *parents, leaf = dotted.split('.')
  node = config
  for part in parents:
    node = node[part]
  with node.ignore_type():
    node[leaf] = value


def _type_name(value: Any) -> str:
  return type(value).__name__


def coerce(key: str, value: Any, default: Any, *, source: str) -> Any:
  """Returns `value` converted to the type of `default`, or raises UsageError."""
  expected = type(default)
  if expected is bool:
    if isinstance(value, bool):
      return value
  elif expected is int:
    if isinstance(value, int) and not isinstance(value, bool):
      return value
  elif expected is float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      return float(value)
  elif expected is str:
    if isinstance(value, str):
      return value
  elif expected in (tuple, list):
    if isinstance(value, (tuple, list)):
      return tuple(tuple(v) if isinstance(v, list) else v for v in value)
  raise UsageError(
      f'{source}: {key}={value!r} has type {_type_name(value)}; '
      f'expected {expected.__name__} (default {default!r})')


def parse_override_value(key: str, text: str, default: Any) -> Any:
  """Parses the text of --config.KEY=TEXT into the type of the default."""
  source = f'--config.{key}'
  if isinstance(default, bool):
    lowered = text.strip().lower()
    if lowered in ('true', '1', 'yes'):
      return True
    if lowered in ('false', '0', 'no'):
      return False
    raise UsageError(f'{source}={text!r}: expected a bool (true or false)')
  if isinstance(default, str):
    return text
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    raise UsageError(
        f'{source}={text!r}: expected {type(default).__name__} '
        f'(default {default!r})') from None
  return coerce(key, value, default, source=source)


def _unknown_key_error(key: str, schema: dict[str, Any], source: str) -> UsageError:
  parent = key.rsplit('.', 1)[0] + '.' if '.' in key else ''
  siblings = sorted(k for k in schema if k.startswith(parent)
                    and '.' not in k[len(parent):])
  return UsageError(f'{source}: unknown config key {key!r}; known keys'
                    f'{" in " + parent[:-1] if parent else ""}: '
                    f'{", ".join(siblings)}')


def conform_to_schema(values: dict[str, Any], *, source: str) -> ml_collections.ConfigDict:
  """A full config from flat `values`: unknown keys and wrong types are errors."""
  config = default_config.get_config()
  schema = flatten(config)
  for key, value in values.items():
    if key not in schema:
      raise _unknown_key_error(key, schema, source)
    _set(config, key, coerce(key, value, schema[key], source=source))
  return config


def load_recipe(path: str) -> ml_collections.ConfigDict:
  """Runs a recipe file's get_config() and checks it against the schema."""
  if not os.path.isfile(path):
    raise UsageError(f'--config={path}: no such file; recipes are in configs/')
  spec = importlib.util.spec_from_file_location('recipe', path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # A recipe is user code: report, don't trace.
    raise UsageError(f'--config={path}: failed to load: {e!r}') from None
  if not hasattr(module, 'get_config'):
    raise UsageError(f'--config={path}: defines no get_config()')
  return conform_to_schema(flatten(module.get_config()), source=path)


def load_saved(workdir: str) -> ml_collections.ConfigDict | None:
  """The config.json a previous run saved in `workdir`, or None."""
  path = os.path.join(workdir, CONFIG_FILE_NAME)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      values = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise UsageError(f'{path}: unreadable saved config: {e}') from None
  return conform_to_schema(values, source=path)


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: list[tuple[str, str]]) -> None:
  schema = flatten(config)
  for key, text in overrides:
    if key not in schema:
      raise _unknown_key_error(key, schema, f'--config.{key}')
    _set(config, key, parse_override_value(key, text, schema[key]))


def differing_keys(saved: ml_collections.ConfigDict,
                   requested: ml_collections.ConfigDict) -> list[str]:
  """Keys that differ and may not change within one work dir."""
  a, b = flatten(saved), flatten(requested)
  return sorted(k for k in a if a[k] != b[k]
                and not k.startswith(MUTABLE_KEY_PREFIXES))


def build_config(recipe_path: str | None, overrides: list[tuple[str, str]],
                 workdir: str, default_recipe: str) -> ml_collections.ConfigDict:
  """The config of this run, following the work dir rules of ARCHITECTURE.md."""
  saved = load_saved(workdir)
  if recipe_path is None:
    config = saved if saved is not None else load_recipe(default_recipe)
  else:
    config = load_recipe(recipe_path)
  config = ml_collections.ConfigDict(config.to_dict())  # a private copy
  apply_overrides(config, overrides)
  if saved is not None:
    differ = differing_keys(saved, config)
    if differ:
      a, b = flatten(saved), flatten(config)
      listing = '; '.join(f'{k}: saved {a[k]!r}, requested {b[k]!r}' for k in differ)
      raise UsageError(
          f'{workdir} holds a run with a different config ({listing}); '
          'use a new --workdir or drop these changes')
  return config


def save(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes config.json atomically (a crash never leaves half a file)."""
  path = os.path.join(workdir, CONFIG_FILE_NAME)
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(flatten(config), f, indent=2, sort_keys=True)
  os.replace(tmp, path)
