"""No value of any config key ends in a traceback: it is accepted, or refused
with one line (UsageError or DataError: exit 2).

Hypothesis draws a few keys at a time, each with a value of its type, a value
of another type (a recipe or a config.json), or the text of
--config.KEY=TEXT, and runs what main.py runs before any work: the schema,
the overrides, validation.check_config, the data checks and
validation.check_against_devices (cli/validation.py) for a few device and process counts. No
training, no device: the draws are fixed (derandomize), so a failure here
fails the same way everywhere.
"""

import os

from hypothesis import given, HealthCheck, settings, strategies as st
import pytest

from cli import config_loader
from cli import validation
from configs import default, schema, sharding
from configs import values
from core.errors import UsageError
from input_pipeline import check_data_config, DataError
from input_pipeline import validate as data_validate
from models import conv_forms, registry, remat
from trainer import engines, eval_data
from trainer.engines import ps

DEFAULTS = schema.dotted_items(default.get_config())
KEYS = sorted(DEFAULTS) + sorted(schema.RENAMED_KEYS)
# Keys whose text names a place on disk: drawn inside a folder of the test's
# own, so that no draw lists or walks the machine's real folders.
PATH_KEYS = ('data.dir', 'data.manual_dir', 'eval.data_dir', 'init.from_workdir',
             'runtime.compilation_cache_dir')
# Text the code accepts somewhere, so that draws get past the first checks
# and reach the later ones.
KNOWN_TEXT = sorted(
    {v for v in DEFAULTS.values() if isinstance(v, str)} |
    set(registry.MODEL_NAMES) | set(registry.DTYPES) | set(remat.MODES) |
    set(conv_forms.FORMS) | set(values.OPTIMIZERS) |
    set(values.LR_SCALINGS) | set(values.LR_SCHEDULES) |
    set(engines.names()) | set(ps.MODES) |
    set(ps.PARTITIONERS) | set(values.NONFINITE) |
    set(values.CLUSTERS) | set(data_validate.SOURCES) |
    set(data_validate.AUGMENTATIONS) | set(values.MESH_AXES) |
    {part for rule in sharding.FSDP_TENSOR for part in rule} |
    {'auto', 'best', '0', '7', '²', '1,3', '3,1', '1,2,3', '2,4', 'mnist',
     'imagenet2012', 'train[:10%]', 'test', 'resnet18,vit_b16', ',', ''})
# Keys whose value decides which later checks run: drawn mostly from what
# they accept.
CHOICES = {
    'data.source': data_validate.SOURCES,
    'data.augment': data_validate.AUGMENTATIONS,
    'model.name': registry.MODEL_NAMES,
    'engine': engines.names(),
    'ps.mode': ps.MODES,
    'eval.checkpoint': ('latest', 'best', '3'),
}
EDGE_INTS = (0, 1, -1, -2, 2, 3, 7, 8, 16, 33, 64, 200, 2**31, 2**32 - 1, 2**32,
             2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**30)
EDGE_FLOATS = (0.0, -0.0, 0.5, 0.875, 1.0, 1.5, -1.0, 1e-300, 1e300,
               float('inf'), float('-inf'), float('nan'))
OVERRIDE_TEXT = ('1e999', '-1e999', 'nan', 'inf', '-1', '(1,2)', '((1,2),)',
                 "(('batch','data'),)", "(('embed','model'),)", "(('a',),)",
                 "[('batch', ['data'])]", '{[1]}', '{}', '[]', '(' * 300,
                 '9' * 5000, 'True', 'None', '...', '1j', "b'x'", '0x10',
                 '1_000', '²', '\x00', 'a\nb', '')

texts = st.one_of(st.sampled_from(KNOWN_TEXT), st.text(max_size=12))
ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-3, 70), st.integers())
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats())
leaves = st.one_of(st.none(), st.booleans(), ints, floats, texts)
rules = st.lists(
    st.one_of(st.tuples(texts, texts), st.tuples(texts), leaves,
              st.lists(leaves, max_size=3), st.tuples(texts, leaves)),
    max_size=4).map(tuple)
wrong_types = st.one_of(leaves, st.lists(leaves, max_size=3),
                        st.dictionaries(st.text(max_size=3), leaves, max_size=2))


@pytest.fixture(scope='module')
def places(tmp_path_factory):
  """Paths a data key may name: missing, a file, an empty folder, folders
  laid out as image splits or a prepared tfds set, and a ~ path."""
  root = tmp_path_factory.mktemp('places')
  (root / 'a_file').write_text('not a folder')
  (root / 'empty').mkdir()
  for split in ('train', 'val'):
    (root / 'splits' / split / 'cat').mkdir(parents=True)
  (root / 'classes' / 'cat').mkdir(parents=True)
  (root / 'classes' / 'cat' / 'a.jpg').write_bytes(b'not a jpeg')
  (root / 'tfds' / 'mnist' / '3.0.1').mkdir(parents=True)
  (root / 'tfds' / 'mnist' / '3.0.1' / 'dataset_info.json').write_text('{}')
  named = [str(root / n) for n in ('missing', 'a_file', 'empty', 'splits',
                                   'classes', 'tfds')]
  return root, named + ['', '~/imagetrain-no-such-folder']


def _path_text(data, places) -> str:
  root, named = places
  # Anything after a name of the test's folder (with '/' and '.' kept out,
  # it cannot climb out of it): NUL bytes, newlines, long names.
  free = st.text(alphabet=st.characters(exclude_characters='/.'), max_size=300)
  return data.draw(st.one_of(st.sampled_from(named),
                             free.map(lambda t: os.path.join(root, 'x' + t))))


def _typed_value(data, key: str, places):
  default_value = DEFAULTS[schema.RENAMED_KEYS.get(key, (key,))[0]]
  if key in PATH_KEYS:
    return _path_text(data, places)
  if key in CHOICES:
    return data.draw(st.one_of(st.sampled_from(CHOICES[key]), texts))
  kind = type(default_value)
  strategy = {bool: st.booleans(), int: ints, float: floats, str: texts,
              tuple: rules}[kind]
  return data.draw(strategy)


def _override_text(data, key: str, places) -> str:
  typed = _typed_value(data, key, places)
  return data.draw(st.one_of(
      st.just(typed if isinstance(typed, str) else repr(typed)),
      st.sampled_from(OVERRIDE_TEXT), st.text(max_size=20)))


def _assert_one_line(error: Exception) -> None:
  message = str(error)
  assert message.strip(), f'{type(error).__name__} without a message'
  assert '\n' not in message and '\r' not in message, message


def _check_like_main(values: dict, overrides: list[tuple[str, str]]) -> None:
  """What main.py does with a config before any work, for several device and
  process counts; UsageError or DataError ends it as in main.py."""
  config = schema.conform_to_schema(values, source='recipe.py')
  config_loader.apply_overrides(config, overrides)
  validation.check_config(config)
  validation.ignored_engine_keys(config)
  evaluation = eval_data.eval_data_config(config)
  check_data_config(config.data)
  if evaluation is not None:
    check_data_config(evaluation)
  for num_devices, num_processes in ((1, 1), (2, 2), (6, 1), (8, 2)):
    try:
      validation.check_against_devices(config, num_devices=num_devices,
                                       num_processes=num_processes)
    except UsageError as e:
      _assert_one_line(e)


def _draw_and_check(data, places, keys: list[str], hows: tuple[str, ...]) -> None:
  values, overrides = {}, []
  for key in keys:
    how = data.draw(st.sampled_from(hows), label=key)
    if how == 'value':
      values[key] = _typed_value(data, key, places)
    elif how == 'other type':
      values[key] = data.draw(wrong_types, label=key)
    else:
      overrides.append((key, _override_text(data, key, places)))
  try:
    _check_like_main(values, overrides)
  except (UsageError, DataError) as e:
    _assert_one_line(e)


# The draws are fixed (derandomize) and kept nowhere (no database), so CI
# sees the same examples every run; about 10 s on one core.
_SETTINGS = settings(deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow])


@settings(_SETTINGS, max_examples=400)
@given(data=st.data())
def test_any_value_of_any_key_is_accepted_or_refused_in_one_line(data, places):
  keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=5,
                            unique=True), label='keys')
  # Mostly values of the key's type: they get past the schema to the checks.
  _draw_and_check(data, places, keys,
                  ('value', 'value', 'value', 'text', 'text', 'other type'))


# The data checks run only for a config that validation accepted, and the
# model's size rules only for sizes of the right type: here the keys they
# read, with values of their types, several at once.
DATA_AND_MODEL_KEYS = sorted(
    k for k in DEFAULTS if k.startswith(('data.', 'eval.', 'model.')))


@settings(_SETTINGS, max_examples=250)
@given(data=st.data())
def test_data_and_model_values_are_accepted_or_refused_in_one_line(data, places):
  keys = data.draw(st.lists(st.sampled_from(DATA_AND_MODEL_KEYS), min_size=1,
                            max_size=6, unique=True), label='keys')
  _draw_and_check(data, places, keys, ('value', 'value', 'text'))


@pytest.mark.parametrize('name', ['vit_ti16', 'vit_s32'])
def test_validation_refuses_exactly_the_vit_sizes_the_model_refuses(name):
  # pylint: disable=g-import-not-at-top
  import jax
  import jax.numpy as jnp
  # pylint: enable=g-import-not-at-top
  for width in (0, 48, 100, 128, 192, 200, 320):
    for image_size in (32, 33, 48, 64):
      config = default.get_config()
      config.model.name, config.model.depth = name, 1
      config.model.width, config.data.image_size = width, image_size
      try:
        validation.check_config(config)
        refused = None
      except UsageError as e:
        refused = str(e)
      model = registry.create_model(name, num_classes=3, width=width, depth=1,
                                    image_size=image_size)
      try:
        jax.eval_shape(lambda x, m=model: m.init(jax.random.key(0), x, train=False),
                       jnp.zeros((1, image_size, image_size, 3)))
        built = True
      except ValueError:
        built = False
      assert built == (refused is None), (width, image_size, refused)
