"""Builds the run's config: recipe or saved config.json, plus --config.KEY=VALUE.

The schema is configs/default.py; configs/schema.py checks values against it
and reads and writes a work dir's config.json. A recipe may only set keys
that the schema declares, with values of the declared type; overrides on the
command line are parsed into the declared type. Nothing here imports jax or tensorflow, so a
bad config is reported before any heavy import or any write to the work dir.
"""

import ast
import importlib.util
import os
import re
from typing import Any

import ml_collections

from configs import schema
from configs import sharding
from core.errors import UsageError
from trainer import engines
from configs.schema import coerce, conform_to_schema, dotted_items, load_saved


# What may differ between runs in one work dir (ARCHITECTURE.md): the length of
# training, cadences, where metrics go, the mesh, the sharding rules and the device count, the
# engine and its own sections (where parameters live and how gradients meet:
# a checkpoint holds the SPMD layout whatever the engine, and the one engine
# metadata, the asynchronous PS counts, records N_w and is rescaled when it
# changes), evaluation settings, where the data lives, host-side performance
# knobs, and init.* (read only to start a run: once the work dir has a
# checkpoint it is ignored, so it may be cleared when the source run is gone),
# and the keys of modes that write no checkpoint (predict, export, plan,
# study, probe). Every engine's sections come from the engines' registry.
# Everything else decides what the checkpoints mean and must match.
MUTABLE_KEY_PREFIXES = (
    'num_train_steps', 'num_epochs', 'log_every_steps', 'eval_every_steps',
    'checkpoint.', 'metrics.', 'mesh.', 'sharding_rules', 'eval.', 'runtime.', 'debug.',
    'nonfinite', 'engine',
    'model.bn_group_size', 'model.conv_form', 'bench.', 'profile_steps',
    'data.dir', 'data.manual_dir', 'data.prefetch_batches', 'data.stall_timeout_s',
    'init.', 'predict.', 'export.', 'probe.', 'plan.', 'study.',
) + tuple(f'{section}.' for name in engines.names()  # every engine's own sections
          for section in engines.package(name).CONFIG_SECTIONS)


def named_sharding_rules(name: str, *, source: str) -> tuple:
  """The set of sharding rules configs/sharding.py defines as `name`
  (FSDP or fsdp), or UsageError listing the names."""
  rules = sharding.NAMED.get(name.strip().upper())
  if rules is None:
    raise UsageError(
        f'{source}={name!r}: no set of that name in configs/sharding.py; '
        f'known: {", ".join(sharding.NAMED)} (or a tuple of '
        "('logical_axis', 'mesh_axis[,mesh_axis]') pairs)")
  return rules


def _is_name(text: str) -> bool:
  return re.fullmatch(r'\s*[A-Za-z_]\w*\s*', text) is not None


def parse_override_value(key: str, text: str, default: Any) -> Any:
  """Parses the text of --config.KEY=TEXT into the type of the default."""
  source = f'--config.{key}'
  if key == 'sharding_rules' and _is_name(text):
    return named_sharding_rules(text, source=source)
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
  # TypeError: an unhashable set member ({[1]}); MemoryError and
  # RecursionError: nesting deeper than the parser takes.
  except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
    raise UsageError(
        f'{source}={text!r}: expected {type(default).__name__} '
        f'(default {default!r})') from None
  return coerce(key, value, default, source=source)


def load_recipe(path: str) -> ml_collections.ConfigDict:
  """Runs a recipe file's get_config() and checks it against the schema."""
  if not os.path.isfile(path):
    raise UsageError(f'--config={path}: no such file; recipes are in configs/')
  if not path.endswith('.py'):
    # A work dir's config.json is no recipe: --workdir reads it by itself.
    raise UsageError(f'--config={path}: a recipe is a Python file '
                     '(configs/RECIPE.py); to go on with a run, give its '
                     '--workdir without --config')
  spec = importlib.util.spec_from_file_location('recipe', path)
  module = importlib.util.module_from_spec(spec)
  # A recipe is user code: whatever it raises is reported, not traced.
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError(f'--config={path}: failed to load: {schema.shown(e, 300)}') from None
  if not callable(getattr(module, 'get_config', None)):
    raise UsageError(f'--config={path}: defines no get_config()')
  try:
    config = module.get_config()
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError(f'--config={path}: get_config() raised {schema.shown(e, 300)}') from None
  if not isinstance(config, ml_collections.ConfigDict):
    raise UsageError(f'--config={path}: get_config() returned '
                     f'{type(config).__name__}; a recipe returns an '
                     'ml_collections.ConfigDict (start from configs/default.py)')
  return conform_to_schema(dotted_items(config), source=path)


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: list[tuple[str, str]]) -> None:
  declared = dotted_items(config)
  for old_key, old_text in overrides:
    # An old name (--config.plan.batch_sizes=...) still works, with a warning.
    source = f'--config.{old_key}'
    key, text = schema.rename_key(old_key, old_text, source=source)
    if key not in declared:
      raise schema.unknown_key_error(key, declared, f'--config.{key}')
    value = parse_override_value(key, str(text), declared[key])
    schema.set_value(config, key, schema.upgrade_value(key, value, source=source))


def differing_keys(saved: ml_collections.ConfigDict,
                   requested: ml_collections.ConfigDict) -> list[str]:
  """Keys that differ and may not change within one work dir."""
  a, b = dotted_items(saved), dotted_items(requested)
  return sorted(k for k in a if a[k] != b[k]
                and not k.startswith(MUTABLE_KEY_PREFIXES))


def build_config(recipe_path: str | None, overrides: list[tuple[str, str]],
                 workdir: str, default_recipe: str) -> ml_collections.ConfigDict:
  """The config of this run, following the work dir rules of ARCHITECTURE.md."""
  saved = load_saved(workdir) if workdir else None
  if recipe_path is None:
    config = saved if saved is not None else load_recipe(default_recipe)
  else:
    config = load_recipe(recipe_path)
  config = ml_collections.ConfigDict(config.to_dict())  # a private copy
  apply_overrides(config, overrides)
  if saved is not None:
    differ = differing_keys(saved, config)
    if differ:
      a, b = dotted_items(saved), dotted_items(config)
      listing = '; '.join(f'{k}: saved {a[k]!r}, requested {b[k]!r}' for k in differ)
      raise UsageError(
          f'{workdir} holds a run with a different config ({listing}); '
          'use a new --workdir or drop these changes')
  return config


