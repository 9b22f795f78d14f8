"""The "shapes" data set: learnable images generated on first use, no download.

Ten classes, each a shape in a colour (see CLASSES); random size, position,
rotation, colour jitter, background tint and gradient, grey clutter lines
and pixel noise keep it from being trivial. The images are written once, as
PNG files in the folder layout of `folder.py`, and from then on read exactly
like a user's own images.

Generation is deterministic (a fixed seed: the data set is the same for
every user and every `config.seed`) and atomic: it happens in a temporary
sibling folder that is renamed into place, so a crash or a concurrent
process never leaves half a data set behind.
"""

import math
import os
import shutil
import tempfile

import numpy as np
from PIL import Image
from PIL import ImageDraw

VERSION = 'shapes-v1'
SEED = 1_2017  # fixed: the data set must not change with config.seed
IMAGE_SIZE = 64
TRAIN_PER_CLASS = 500
VAL_PER_CLASS = 60
SPLITS = ('train', 'val')  # fixed: data.train_split/eval_split are for folders

_COLOURS = {  # RGB base colours, far apart in hue
    'red': (220, 40, 40),
    'green': (40, 180, 60),
    'blue': (50, 80, 230),
    'yellow': (230, 210, 40),
    'magenta': (210, 50, 210),
}
# (colour, shape) per class. Each colour is worn by a solid shape and by a
# thin or holed one, and four shapes come in two colours, so neither cue
# alone is enough; pairs that share a colour differ in more than a few
# corner pixels, so that they stay apart at 32 px. The name is the folder,
# hence the label order is the sorted order of the names.
CLASSES = (
    ('red', 'circle'), ('red', 'cross'),
    ('green', 'triangle'), ('green', 'ring'),
    ('blue', 'square'), ('blue', 'bars'),
    ('yellow', 'diamond'), ('yellow', 'star'),
    ('magenta', 'square'), ('magenta', 'ring'),
)
# Largest rotation in degrees; small for shapes that a rotation would turn
# into another class (a square turned 45 degrees is a diamond).
_MAX_ROTATION = {'circle': 0, 'ring': 0, 'square': 10, 'diamond': 10,
                 'bars': 20, 'triangle': 180, 'cross': 180, 'star': 180}
_SUPERSAMPLE = 4  # shapes are drawn larger and shrunk, for smooth edges


def class_names() -> list[str]:
  return sorted(f'{colour}_{shape}' for colour, shape in CLASSES)


def default_dir() -> str:
  """`$XDG_CACHE_HOME/imagetrain/shapes-v1`, by default under ~/.cache."""
  cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(cache, 'imagetrain', VERSION)


def _polygon(shape: str) -> list[list[tuple[float, float]]]:
  """Polygons of a shape in unit coordinates (radius 1, centred at 0)."""
  if shape == 'square':
    s = 0.8
    return [[(-s, -s), (s, -s), (s, s), (-s, s)]]
  if shape == 'diamond':
    # Narrower than tall, so it is not just a rotated square.
    return [[(0, -1), (0.65, 0), (0, 1), (-0.65, 0)]]
  if shape == 'triangle':
    return [[(math.cos(a), math.sin(a))
             for a in np.radians([-90, 30, 150])]]
  if shape == 'cross':
    t = 0.28
    return [[(-1, -t), (1, -t), (1, t), (-1, t)],
            [(-t, -1), (t, -1), (t, 1), (-t, 1)]]
  if shape == 'star':
    angles = np.radians(np.arange(10) * 36 - 90)
    radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.36)  # spiky: not a blob
    return [list(zip(radii * np.cos(angles), radii * np.sin(angles)))]
  if shape == 'bars':
    w = 0.2
    return [[(x - w / 2, -0.9), (x + w / 2, -0.9), (x + w / 2, 0.9),
             (x - w / 2, 0.9)] for x in (-0.6, 0.0, 0.6)]
  raise ValueError(f'no polygon for {shape!r}')


def _shape_mask(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
  """Float [size, size] coverage in [0, 1] of one randomly placed shape."""
  big = size * _SUPERSAMPLE
  radius = rng.uniform(0.2, 0.34) * big
  # Keep an eighth of the image clear at the border: crop_flip pads by S/8
  # with a reflection, which must mirror background, not half a shape.
  margin = radius + big / 8
  cx, cy = rng.uniform(margin, big - margin, size=2)
  mask = Image.new('L', (big, big), 0)
  draw = ImageDraw.Draw(mask)
  if shape in ('circle', 'ring'):
    draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius],
                 fill=255)
    if shape == 'ring':
      inner = radius * 0.6
      draw.ellipse([cx - inner, cy - inner, cx + inner, cy + inner], fill=0)
  else:
    angle = np.radians(rng.uniform(-1, 1) * _MAX_ROTATION[shape])
    cos, sin = math.cos(angle), math.sin(angle)
    for poly in _polygon(shape):
      draw.polygon([(cx + radius * (x * cos - y * sin),
                     cy + radius * (x * sin + y * cos)) for x, y in poly],
                   fill=255)
  mask = mask.resize((size, size), Image.Resampling.BOX)
  return np.asarray(mask, np.float32) / 255.0


def _background(size: int, rng: np.random.Generator) -> np.ndarray:
  """Float [size, size, 3]: a tinted grey with a gradient and clutter lines."""
  grey = rng.uniform(40, 200)
  tint = rng.uniform(-20, 20, size=3)
  direction = rng.uniform(0, 2 * np.pi)
  ramp = np.linspace(-1, 1, size)
  yy, xx = np.meshgrid(ramp, ramp, indexing='ij')
  gradient = rng.uniform(0, 30) * (
      xx * math.cos(direction) + yy * math.sin(direction))
  image = grey + tint + gradient[..., None]
  # Grey clutter: edges that are not the object, without a colour cue.
  clutter = Image.new('L', (size, size), 0)
  draw = ImageDraw.Draw(clutter)
  for _ in range(rng.integers(0, 4)):
    draw.line([tuple(rng.uniform(0, size, 2)), tuple(rng.uniform(0, size, 2))],
              fill=int(rng.integers(0, 256)), width=1)
  lines = np.asarray(clutter, np.float32)[..., None]
  return np.where(lines > 0, lines, image)


def render(class_index: int, size: int, rng: np.random.Generator) -> np.ndarray:
  """One uint8 [size, size, 3] image of CLASSES[class_index]."""
  colour_name, shape = CLASSES[class_index]
  colour = (np.asarray(_COLOURS[colour_name], np.float32)
            + rng.uniform(-25, 25, size=3)) * rng.uniform(0.75, 1.1)
  mask = _shape_mask(shape, size, rng)[..., None]
  image = _background(size, rng) * (1 - mask) + colour * mask
  image += rng.normal(0, rng.uniform(3, 14), size=image.shape)
  return np.clip(np.round(image), 0, 255).astype(np.uint8)


def _write_split(root: str, split: str, per_class: int, size: int,
                 seed: int) -> None:
  split_id = SPLITS.index(split)
  for class_index, (colour, shape) in enumerate(CLASSES):
    folder = os.path.join(root, split, f'{colour}_{shape}')
    os.makedirs(folder)
    for i in range(per_class):
      # One generator per image: an image depends only on its own identity.
      rng = np.random.default_rng([seed, split_id, class_index, i])
      Image.fromarray(render(class_index, size, rng)).save(
          os.path.join(folder, f'{i:05d}.png'), compress_level=1)


def is_complete(path: str) -> bool:
  """True if `path` holds a whole generated data set."""
  # Only a rename puts a folder here, so any non-empty folder is a whole data
  # set (an empty one may be a data.dir the user made for us to fill).
  return os.path.isdir(path) and bool(os.listdir(path))


def ensure(path: str | None = None, *, image_size: int = IMAGE_SIZE,
           train_per_class: int = TRAIN_PER_CLASS,
           val_per_class: int = VAL_PER_CLASS, seed: int = SEED) -> str:
  """The shapes data set at `path` (default: `default_dir()`), made if absent.

  Returns:
    The data root, with `train/<class>/*.png` and `val/<class>/*.png`.
  """
  path = os.path.abspath(os.path.expanduser(path or default_dir()))
  if is_complete(path):
    return path
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(path)}.tmp-', dir=parent)
  try:
    for split, per_class in zip(SPLITS, (train_per_class, val_per_class)):
      _write_split(tmp, split, per_class, image_size, seed)
    if os.path.isdir(path) and not os.listdir(path):
      os.rmdir(path)  # rename replaces only an absent target on every OS
    os.rename(tmp, path)
  except OSError:
    # Another process renamed its copy into place first: use that one.
    if not is_complete(path):
      raise
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  return path
