"""Whether a tfds data set is prepared, or can be: files only, no imports.

Run right after flags are parsed, so it must not import TensorFlow or
tensorflow_datasets (seconds each): it looks for the files that tfds writes,
`<data_dir>/<name>[/<config>]/<version>/dataset_info.json`, and, where the
data set is to be prepared from downloaded archives, for those archives.
"""

import glob
import os

from input_pipeline.errors import DataError

# Archives that tfds needs in the manual dir to prepare a data set that it
# cannot download itself (only these names are checked here; for others tfds
# says what is missing when it prepares).
MANUAL_FILES = {
    'imagenet2012': ('ILSVRC2012_img_train.tar', 'ILSVRC2012_img_val.tar'),
}
_INFO = 'dataset_info.json'


def default_data_dir() -> str:
  """Where tfds looks when data.dir is empty: $TFDS_DATA_DIR or ~/tensorflow_datasets."""
  return os.environ.get('TFDS_DATA_DIR') or os.path.join(
      os.path.expanduser('~'), 'tensorflow_datasets')


def data_dir(data_config) -> str:
  return os.path.expanduser(data_config.dir) if data_config.dir else (
      default_data_dir())


def _is_remote(path: str) -> bool:
  return '://' in path


def _split_name(name: str) -> tuple[list[str], str | None]:
  """'imagenette/320px-v2:1.0.0' -> (['imagenette', '320px-v2'], '1.0.0')."""
  base, _, version = name.partition(':')
  return [part for part in base.split('/') if part], version or None


def dataset_folder(root: str, name: str) -> str:
  return os.path.join(root, *_split_name(name)[0])


def is_prepared(root: str, name: str) -> bool:
  """True if `root` holds a prepared version of `name`."""
  folder = dataset_folder(root, name)
  _, version = _split_name(name)
  if version:
    return os.path.isfile(os.path.join(folder, version, _INFO))
  # <name>/<version>/ or, for a data set with configs, <name>/<config>/<version>/.
  return bool(glob.glob(os.path.join(glob.escape(folder), '*', _INFO)) or
              glob.glob(os.path.join(glob.escape(folder), '*', '*', _INFO)))


def manual_files(name: str) -> tuple[str, ...]:
  """The archives data.manual_dir must hold to prepare `name` ((): unknown)."""
  return MANUAL_FILES.get(_split_name(name)[0][0], ())


def check(data_config) -> None:
  """Raises DataError, in one line, if the data set is neither there nor makeable."""
  name = data_config.name
  if not name or not _split_name(name)[0]:
    raise DataError("data.source='tfds' needs data.name, a tfds data set such "
                    'as imagenet2012 or imagenette/320px-v2')
  root = data_dir(data_config)
  if not 0.0 < data_config.eval_crop_fraction <= 1.0:
    raise DataError('data.eval_crop_fraction must be in (0, 1], got '
                    f'{data_config.eval_crop_fraction}')
  if _is_remote(root) or is_prepared(root, name):
    return  # remote data dirs are checked when they are opened
  wanted = manual_files(name)
  listed = ' and '.join(wanted)
  if data_config.manual_dir:
    manual = os.path.expanduser(data_config.manual_dir)
    if not os.path.isdir(manual):
      raise DataError(
          f'{name} is not prepared in {root} and data.manual_dir {manual} '
          f'does not exist: make it and put {listed or "the downloaded files"}'
          ' there')
    missing = [f for f in wanted if not os.path.exists(os.path.join(manual, f))]
    if missing:
      raise DataError(
          f'{name} is not prepared in {root} and data.manual_dir {manual} '
          f'lacks {" and ".join(missing)}: put {listed} there to prepare it')
    return
  folder = dataset_folder(root, name)
  hint = (f', or put {listed} in a folder and set data.manual_dir to it to '
          f'prepare it there' if wanted else
          f', e.g. with `tfds build {name} --data_dir={root}`')
  raise DataError(
      f'no prepared tfds data set {name} in {root} (looked for '
      f'{folder}/<version>/{_INFO}): set data.dir to the tfds data dir that '
      f'holds it{hint}')
