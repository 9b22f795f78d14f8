"""ViT-B/16 on ImageNet-1k at 224 px, DeiT-style (Touvron et al. 2021).

AdamW, 300 epochs, batch 1024, warm-up 5 epochs then cosine, weight decay
0.05, label smoothing 0.1, mixup 0.8, gradient clipping at 1.0, bfloat16
compute on GPUs and TPUs (model.dtype=auto) with float32 parameters. Data
parallel by default; the rules already admit FSDP and tensor parallelism
(--config.mesh.fsdp=..., mesh.tensor=...).
DeiT-B reports 81.8% top-1 with RandAugment, CutMix and random erasing added,
which this recipe does not have: expect less. Not measured here.
"""

from configs import default


def get_config():
  config = default.get_config()
  config.model.name = 'vit_b16'
  config.model.dtype = 'auto'  # bfloat16 on GPUs and TPUs, float32 on CPU
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.eval_split = 'validation'  # all 50,000 images, pad + mask
  config.data.image_size = 224
  config.data.augment = 'inception_crop'
  config.batch_size = 1024
  config.num_epochs = 300.0
  config.optimizer = 'adamw'
  config.learning_rate = 2.5e-4  # per 256 images: 1e-3 at batch 1024
  config.momentum = 0.9  # adamw beta1
  config.warmup_epochs = 5.0
  config.weight_decay = 0.05
  config.label_smoothing = 0.1
  config.mixup_alpha = 0.8
  config.grad_clip_norm = 1.0
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint.every_steps = 2000
  config.checkpoint.every_minutes = 30.0
  return config
