"""Quickstart: a narrow ResNet-18 on the embedded shapes data, 32 px, 2 CPU cores.

Needs no download: the shapes data set is generated on first use. Reaches
over 90% top-1 on its validation split in a few minutes (README.md).
"""

from configs import default


def get_config():
  config = default.get_config()
  config.model.name = 'resnet18'
  config.model.width = 16  # a quarter of the published width: CPU-sized
  config.data.source = 'shapes'
  config.data.image_size = 32
  config.data.augment = 'crop_flip'
  config.batch_size = 128
  config.num_epochs = 8.0
  config.learning_rate = 0.2  # per 256 images: 0.1 at batch 128
  config.warmup_epochs = 1.0
  config.weight_decay = 5e-4
  config.log_every_steps = 10
  config.checkpoint.every_steps = 50
  return config
