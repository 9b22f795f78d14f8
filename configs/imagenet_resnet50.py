"""ResNet-50 v1.5 on ImageNet-1k at 224 px: the Goyal et al. (2017) recipe.

SGD with momentum 0.9, 0.1 per 256 images (0.4 at batch 1024) with a linear
warm-up of 5 epochs, then cosine decay over 90 epochs; L2 weight decay 1e-4
on kernels only (the optimiser masks batch-norm scales and biases). Inception
crop + flip for training, centre crop 87.5% for evaluation. Label smoothing
is off, as in the reference; 0.1 is the usual option
(--config.label_smoothing=0.1). The reference reaches about 76% top-1.

    python main.py --config=configs/imagenet_resnet50.py --workdir=runs/r50 \
        --config.data.dir=/data/tensorflow_datasets

with imagenet2012 prepared there by tfds, or add
--config.data.manual_dir=/data/imagenet-tars (ILSVRC2012_img_train.tar and
ILSVRC2012_img_val.tar) to prepare it there on first use (once, hours).
It computes in bfloat16 on GPUs and TPUs, in float32 on CPU (model.dtype=auto).
"""

from configs import default


def get_config():
  config = default.get_config()
  config.model.name = 'resnet50'
  config.model.dtype = 'auto'  # bfloat16 on GPUs and TPUs, float32 on CPU
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.train_split = 'train'
  config.data.eval_split = 'validation'  # all 50,000 images, pad + mask
  config.data.image_size = 224
  config.data.augment = 'inception_crop'
  config.data.eval_crop_fraction = 0.875  # resize to 256, centre 224
  config.batch_size = 1024
  config.num_epochs = 90.0
  config.optimizer = 'sgd'
  config.momentum = 0.9
  config.nesterov = False
  config.learning_rate = 0.1  # per 256 images
  config.lr_scaling = 'linear'
  config.lr_schedule = 'cosine'
  config.warmup_epochs = 5.0
  config.weight_decay = 1e-4
  config.label_smoothing = 0.0
  config.log_every_steps = 100
  config.eval_every_steps = 0  # once per epoch (1,251 steps) and at the end
  config.checkpoint.every_steps = 1000
  config.checkpoint.every_minutes = 30.0
  return config
