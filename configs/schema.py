"""The config schema's values in and out: checked against configs/default.py.

Every config, from a recipe, the command line or a work dir's config.json,
becomes a full ConfigDict of the schema here: an unknown key or a value of
the wrong type is a UsageError naming the key. A work dir's config is
`config.json`, a flat {"dotted.key": value} object. Nothing here imports
jax or tensorflow.
"""

import json
import math
import os
from typing import Any

from absl import logging
import ml_collections

from core import atomic
from configs import default as default_config
from core.errors import UsageError

CONFIG_FILE_NAME = 'config.json'


def dotted_items(config: ml_collections.ConfigDict, prefix: str = '') -> dict[str, Any]:
  """{'a.b': value} for every leaf of a (nested) ConfigDict."""
  flat = {}
  for key, value in config.items():
    name = f'{prefix}{key}'
    if isinstance(value, ml_collections.ConfigDict):
      flat.update(dotted_items(value, name + '.'))
    else:
      flat[name] = value
  return flat


def set_value(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
  *parents, leaf = dotted.split('.')
  node = config
  for part in parents:
    node = node[part]
  with node.ignore_type():
    node[leaf] = value


def _type_name(value: Any) -> str:
  return type(value).__name__


def shown(value: Any, limit: int = 120) -> str:
  """repr(value) for a one-line message, cut to `limit` characters (an int
  of over 4300 digits has no repr at all)."""
  try:
    text = repr(value)
  except ValueError:
    return f'<{_type_name(value)} too large to print>'
  return text if len(text) <= limit else text[:limit - 3] + '...'


# Integers travel as int64 (numpy, orbax, the metrics): a larger one would
# overflow far from the key that set it.
_INT64 = (-2**63, 2**63 - 1)


def coerce(key: str, value: Any, default: Any, *, source: str) -> Any:
  """Returns `value` converted to the type of `default`, or raises UsageError.

  Integers must fit in int64 and floats must be finite: no key means anything
  by nan or inf, and both would only fail later, inside the arithmetic."""
  expected = type(default)
  if expected is bool:
    if isinstance(value, bool):
      return value
  elif expected is int:
    if isinstance(value, int) and not isinstance(value, bool):
      if not _INT64[0] <= value <= _INT64[1]:
        raise UsageError(f'{source}: {key}={shown(value)} does not fit in 64 bits')
      return value
  elif expected is float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      try:
        value = float(value)
      except OverflowError:  # an int beyond the float range
        value = math.inf
      if not math.isfinite(value):
        raise UsageError(f'{source}: {key}={shown(value)} must be a finite number')
      return value
  elif expected is str:
    if isinstance(value, str):
      return value
  elif expected in (tuple, list):
    if isinstance(value, (tuple, list)):
      return tuple(tuple(v) if isinstance(v, list) else v for v in value)
  raise UsageError(
      f'{source}: {key}={shown(value)} has type {_type_name(value)}; '
      f'expected {expected.__name__} (default {default!r})')


def unknown_key_error(key: str, schema: dict[str, Any], source: str) -> UsageError:
  parent = key.rsplit('.', 1)[0] + '.' if '.' in key else ''
  siblings = sorted(k for k in schema if k.startswith(parent)
                    and '.' not in k[len(parent):])
  return UsageError(f'{source}: unknown config key {key!r}; known keys'
                    f'{" in " + parent[:-1] if parent else ""}: '
                    f'{", ".join(siblings)}')


def _eval_checkpoint_from_step(step: Any) -> str:
  """eval.checkpoint_step (-1: latest) as an eval.checkpoint value."""
  step = int(step)
  return 'latest' if step == -1 else str(step)


# Keys renamed since they were introduced: old name -> (new name, how an old
# value becomes a new one, or None when it carries over). A saved
# config.json, a recipe or --config.OLD=VALUE with an old name still loads,
# with a warning, so work dirs and scripts of earlier versions keep working.
RENAMED_KEYS: dict[str, tuple[str, Any]] = {
    'plan.batch_sizes': ('plan.per_worker_batch_sizes', None),
    'plan.bandwidth_gbps': ('plan.link_bandwidth_gbps', None),
    'plan.latency_ms': ('plan.link_latency_ms', None),
    'study.batch_sizes': ('study.global_batch_sizes', None),
    'study.bandwidths_gbps': ('study.link_bandwidths_gbps', None),
    'eval.checkpoint_step': ('eval.checkpoint', _eval_checkpoint_from_step),
    'ps.num_workers': ('network.num_workers', None),
    'ps.bandwidth_gbps': ('network.bandwidth_gbps', None),
    'ps.latency_ms': ('network.latency_ms', None),
}
# Values whose meaning changed: (key, old value) -> the value that means the
# same now. ps.max_staleness=-1 meant "unset, 1".
LEGACY_VALUES: dict[tuple[str, Any], Any] = {('ps.max_staleness', -1): 1}
_warned: set[tuple[str, str]] = set()


def rename_key(key: str, value: Any, *, source: str) -> tuple[str, Any]:
  """(key, value) with an old key name replaced by today's, warning once."""
  if key not in RENAMED_KEYS:
    return key, value
  new_key, convert = RENAMED_KEYS[key]
  try:
    new_value = convert(value) if convert else value
  except (TypeError, ValueError, OverflowError):
    raise UsageError(f'{source}: {key}={shown(value)} (now {new_key}) is not a '
                     'valid value') from None
  _warn_once(source, key, f'{source}: {key} is now {new_key}; read as '
             f'{new_key}={new_value!r}')
  return new_key, new_value


def upgrade_value(key: str, value: Any, *, source: str) -> Any:
  """`value` of `key` in today's meaning (LEGACY_VALUES), warning once."""
  if isinstance(value, (list, tuple)) or (key, value) not in LEGACY_VALUES:
    return value
  new_value = LEGACY_VALUES[key, value]
  _warn_once(source, key, f'{source}: {key}={value!r} is the old spelling of '
             f'{key}={new_value!r}; read as that')
  return new_value


def _warn_once(source: str, key: str, message: str) -> None:
  if (source, key) not in _warned:
    _warned.add((source, key))
    logging.warning('%s', message)


def conform_to_schema(values: dict[str, Any], *, source: str) -> ml_collections.ConfigDict:
  """A full config from flat `values`: unknown keys and wrong types are errors.

  Old key names and values (RENAMED_KEYS, LEGACY_VALUES) are upgraded."""
  config = default_config.get_config()
  schema = dotted_items(config)
  for old_key, old_value in values.items():
    key, value = rename_key(old_key, old_value, source=source)
    if key not in schema:
      raise unknown_key_error(key, schema, source)
    value = upgrade_value(key, coerce(key, value, schema[key], source=source), source=source)
    set_value(config, key, value)
  return config


_JSON_TYPES = {list: 'array', str: 'string', int: 'number', float: 'number',
               bool: 'boolean', type(None): 'null'}


def load_saved(workdir: str) -> ml_collections.ConfigDict | None:
  """The config.json a previous run saved in `workdir`, or None."""
  path = os.path.join(workdir, CONFIG_FILE_NAME)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      values = json.load(f)
  # ValueError: not JSON, or not UTF-8; RecursionError: nested too deep.
  except (OSError, ValueError, RecursionError) as e:
    raise UsageError(f'{path}: unreadable saved config: {e}') from None
  if not isinstance(values, dict):
    raise UsageError(f'{path}: holds a JSON {_JSON_TYPES.get(type(values), "value")}, '
                     'not the object of "dotted.key": value that a run saves there')
  return conform_to_schema(_persisted(values), source=path)


# Fault injection for the tests: it applies to the run whose command line
# sets it. Never saved, and dropped from a config.json that an earlier
# version saved it into, so that a plain rerun does not pause or fail again.
ONE_RUN_KEY_PREFIXES = ('debug.',)


def _persisted(values: dict[str, Any]) -> dict[str, Any]:
  """`values` less the keys that apply to one run only."""
  return {k: v for k, v in values.items() if not k.startswith(ONE_RUN_KEY_PREFIXES)}


def save(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes config.json atomically (a crash never leaves half a file),
  without the one-run keys (ONE_RUN_KEY_PREFIXES)."""
  path = os.path.join(workdir, CONFIG_FILE_NAME)
  atomic.write_text(path, json.dumps(_persisted(dotted_items(config)), indent=2,
                                     sort_keys=True))
