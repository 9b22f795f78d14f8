"""Your own images: a folder of class sub-folders, ResNet-18 at 64 px.

    python main.py --config=configs/folder.py --workdir=runs/mine \
        --config.data.dir=/path/to/images

with /path/to/images/train/<class>/*.jpg and /path/to/images/val/<class>/*.jpg
(JPEG or PNG; greyscale and RGBA are converted to RGB). The class-name to
index map is saved as classes.json in the work dir.
"""

from configs import default


def get_config():
  config = default.get_config()
  config.model.name = 'resnet18'
  config.data.source = 'folder'
  config.data.dir = ''  # required: set with --config.data.dir=...
  config.data.image_size = 64
  config.data.augment = 'crop_flip'
  config.batch_size = 64
  config.num_epochs = 30.0
  config.learning_rate = 0.1
  config.warmup_epochs = 2.0
  config.log_every_steps = 20
  config.checkpoint.every_steps = 500
  config.checkpoint.keep_best = True
  return config
