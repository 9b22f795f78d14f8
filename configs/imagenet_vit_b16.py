"""ViT-B/16 on ImageNet-1k at 224 px: DeiT-B (Touvron et al. 2021), batch 1024.

DeiT-B without distillation: AdamW at 5e-4 per 512 images (1e-3 at batch
1024) after a 5-epoch warm-up, cosine decay over 300 epochs, weight decay
0.05, label smoothing 0.1, stochastic depth 0.1, no dropout and no gradient
clipping; RandAugment (2 operations, magnitude 9, std 0.5), mixup 0.8 or
CutMix 1.0 on every batch (half each), random erasing 0.25 and repeated
augmentation (3 copies of each image) on an Inception crop + flip. bfloat16
compute on GPUs and TPUs (model.dtype=auto) with float32 parameters. Data
parallel by default; the rules already admit FSDP and tensor parallelism
(--config.mesh.fsdp=..., mesh.tensor=...).

    python main.py --config=configs/imagenet_vit_b16.py --workdir=runs/vit_b16 \\
        --config.data.dir=/data/tensorflow_datasets
"""

from configs import default
from configs import paper

PAPER = paper.Paper(
    source=('Touvron, Cord, Douze, Massa, Sablayrolles, Jegou 2021, "Training '
            'data-efficient image transformers & distillation through attention", '
            'arXiv:2012.12877, Tables 8 and 9; where the table is silent, the '
            'defaults of its repository (github.com/facebookresearch/deit, its '
            'training script and sampler)'),
    settings={
        'model.name': ('vit_b16', 'DeiT-B: the ViT-B/16 architecture'),
        'data.image_size': (224, 'Table 8: "pre-trained 224^2"'),
        'optimizer': ('adamw', 'Table 9'),
        'momentum': (0.9, "AdamW's beta1: --opt-betas unset, AdamW's default (0.9, 0.999)"),
        'learning_rate': (2.5e-4, 'Table 9: 0.0005 x batch size / 512, i.e. 2.5e-4 per 256'),
        'lr_scaling': ('linear', 'Table 9 and section 6: linear in the batch size'),
        'lr_schedule': ('cosine', 'Table 9'),
        'warmup_epochs': (5.0, 'Table 9'),
        'num_epochs': (300.0, 'Table 9'),
        'weight_decay': (0.05, 'Table 9'),
        'label_smoothing': (0.1, 'Table 9'),
        'model.dropout_rate': (0.0, 'Table 9: no dropout'),
        'model.drop_path_rate': (0.1, 'Table 9: stochastic depth 0.1'),
        'grad_clip_norm': (0.0, 'Table 9: no gradient clipping'),
        'ema_decay': (0.0, 'Table 8: the 81.8% row has no moving average (81.9% with '
                      'one; the repository turns it on by default, 0.99996)'),
        'data.randaugment_num_ops': (2, 'Table 9: RandAugment 9/0.5; --aa '
                                     'rand-m9-mstd0.5-inc1, whose operations per image '
                                     "are timm's default of 2"),
        'data.randaugment_magnitude': (9.0, 'Table 9 (m9)'),
        'data.randaugment_magnitude_std': (0.5, 'Table 9 (mstd0.5)'),
        'mixup_alpha': (0.8, 'Table 9: mixup 0.8 (--mixup 0.8)'),
        'cutmix_alpha': (1.0, 'Table 9: CutMix 1.0 (--cutmix 1.0)'),
        'mixup_switch_prob': (0.5, '--mixup-switch-prob 0.5, --mixup-prob 1.0: every '
                              'batch one or the other'),
        'data.random_erasing_prob': (0.25, 'Table 9: erasing 0.25 (--reprob 0.25, '
                                     '--remode pixel)'),
        'data.repeated_augmentation': (3, 'Table 9: repeated augmentation; its sampler '
                                       'repeats each image 3 times in an epoch of the '
                                       "data set's length"),
    },
    batch_size=1024,
    top1=81.8,
    top1_where=('Table 8, "none: DeiT-B": 81.8% +-0.2 at 224 px, no distillation; '
                'also Table 7'),
    deviations=(
        'the rate is set every step, from 0 at the start of the warm-up to 0 at '
        'the end; the repository\'s timm scheduler sets it once per epoch, from 1e-6 '
        '(--warmup-lr) to 1e-5 (--min-lr)',
        'the copies of an image share a batch on one host and may share a device; '
        'the repository sends them to different GPUs of the same step. A ViT has '
        'no batch norm, so the gradient is the same',
    ),
)
__doc__ += paper.describe(PAPER)


def get_config():
  config = paper.apply(default.get_config(), PAPER)
  config.batch_size = PAPER.batch_size
  config.model.dtype = 'auto'  # bfloat16 on GPUs and TPUs, float32 on CPU
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.eval_split = 'validation'  # all 50,000 images, pad + mask
  config.data.augment = 'inception_crop'
  config.data.eval_crop_fraction = 0.875  # the repository's --eval-crop-ratio
  config.log_every_steps = 100
  config.eval_every_steps = 5000
  config.checkpoint.every_steps = 2000
  config.checkpoint.every_minutes = 30.0
  return config
