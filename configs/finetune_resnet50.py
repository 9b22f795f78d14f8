"""ResNet-50 fine-tuned at 480 px by BiT-HyperRule, set for a data set of
more than 500,000 images (ImageNet-1k), batch 512.

Starts from published weights (init.from_weights: a ResNet-50 in timm's
layout, `model.safetensors`; docs/published-weights.md) with a new,
zero-initialised classifier. SGD with momentum 0.9, no weight decay, 500
warm-up steps to 0.003, the rate divided by 10 at steps 6,000, 12,000 and
18,000, 20,000 steps in all, mixup with alpha 0.1.

    python main.py --config=configs/finetune_resnet50.py --workdir=runs/resnet50_ft \\
        --config.init.from_weights=model.safetensors \\
        --config.data.dir=/data/tensorflow_datasets

BiT-HyperRule sets the schedule and mixup by the data set's size; for your own
images (data.source=folder) take the row of your size: under 20,000 images,
100 warm-up steps, falls at 200,300,400 of 500 steps and no mixup
(mixup_alpha=0); under 500,000, 500 warm-up steps, falls at 3000,6000,9000 of
10,000 steps, mixup 0.1; otherwise this recipe. Images of under 96 x 96
pixels are trained at 128 px instead of 480.
"""

from configs import paper

PAPER = paper.Paper(
    source=('Kolesnikov et al. 2020, "Big Transfer (BiT): General Visual '
            'Representation Learning" (its BiT-HyperRule), and its code, '
            'github.com/google-research/big_transfer (bit_hyperrule.py and '
            'bit_pytorch/train.py)'),
    settings={
        'model.name': ('resnet50', "the README's ImageNet result is for R50x1, a ResNet-50"),
        'data.image_size': (480, 'bit_hyperrule.py: crop 480 for images of 96 x 96 or more'),
        'init.reset_head': (True, 'train.py: zero_head=True, a new zero-initialised head'),
        'optimizer': ('sgd', 'train.py: torch.optim.SGD'),
        'momentum': (0.9, 'train.py: momentum=0.9'),
        'weight_decay': (0.0, 'train.py: no weight decay'),
        'grad_clip_norm': (0.0, 'train.py: no gradient clipping'),
        'learning_rate': (0.003, 'bit_hyperrule.py: base_lr 0.003 at the batch of 512'),
        'lr_scaling': ('none', 'the rate is given for the batch itself'),
        'lr_schedule': ('step', 'bit_hyperrule.py: get_lr, staircase decays by 10'),
        'lr_step_steps': ('6000,12000,18000',
                          'bit_hyperrule.py: get_schedule for 500,000 images or more'),
        'lr_step_factor': (0.1, 'bit_hyperrule.py: base_lr /= 10 at each'),
        'warmup_steps': (500, 'bit_hyperrule.py: linear warm-up over the first 500 steps'),
        'num_train_steps': (20_000, 'bit_hyperrule.py: training ends at step 20,000'),
        'mixup_alpha': (0.1, 'bit_hyperrule.py: get_mixup, 0.1 for 20,000 images or more'),
        'label_smoothing': (0.0, 'train.py: plain cross-entropy'),
        'ema_decay': (0.0, 'train.py: no moving average'),
    },
    batch_size=512,
    top1=80.68,
    top1_where=('the repository\'s README, "ImageNet results": BiT-M-R50x1, pre-trained '
                'on ImageNet-21k, fine-tuned on ImageNet by bit_pytorch with BiT-HyperRule '
                '(batch 512 in 4 micro-batches) on 8 V100 GPUs; that model is BiT\'s '
                'ResNet-v2, see the first deviation'),
    deviations=(
        "the model is this project's ResNet-50 v1.5 with batch norm, the one timm "
        "and torchvision publish weights for; BiT's R50x1 is a pre-activation "
        'ResNet (v2) with group norm and weight standardisation, whose weights do '
        'not load into it. The published figure is for that model',
        "batch norm's running statistics go on updating as the model fine-tunes; "
        'BiT has none',
        'a training image is resized to 480 x 480, reflect-padded by 60 px and '
        "randomly cropped back to 480 (data.augment crop_flip); BiT's code crops "
        '480 x 480 from the image resized to 512 x 512',
        'evaluation takes the centred square of the shorter side resized to 480 '
        '(data.eval_crop_fraction 1.0); the code resizes the whole image to 480 x 480',
        "the images are normalised by ImageNet's channel mean and deviation; the "
        'code scales them to [-1, 1]',
        "mixup's partner is the next image of the batch; the code draws a random "
        'permutation. Both draw one ratio per batch',
        'the rate falls at steps 6,000, 12,000 and 18,000 themselves; the code '
        'lowers it one step later',
    ),
)
__doc__ += paper.describe(PAPER)


def get_config():
  return paper.imagenet_fine_tuning(PAPER, augment='crop_flip')
