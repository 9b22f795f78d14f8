"""ViT-B/16 fine-tuned on ImageNet-1k at 384 px from ImageNet-21k weights, as
google-research/vision_transformer's fine-tuning code does, batch 512.

Starts from published weights (init.from_weights: an ImageNet-21k ViT-B/16
`.npz` of the AugReg release, or the original one; docs/published-weights.md)
with a new, zero-initialised classifier for the 1,000 classes, the 14 x 14
position embedding resampled to 24 x 24. SGD with momentum 0.9, no weight
decay, the global gradient norm clipped at 1, 500 warm-up steps to 0.03,
cosine decay to 0 over 20,000 steps; an Inception crop and flip in training,
no other augmentation or regularisation.

    python main.py --config=configs/finetune_vit_b16.py --workdir=runs/vit_b16_ft \\
        --config.init.from_weights=B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz \\
        --config.data.dir=/data/tensorflow_datasets
"""

from configs import paper

PAPER = paper.Paper(
    source=('Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", and its '
            'fine-tuning code, github.com/google-research/vision_transformer '
            '(vit_jax/configs/common.py, its ImageNet preset, vit_jax/train.py and '
            'the ViT-B_16 model config); the AugReg release (Steiner et al. 2021) '
            'is fine-tuned by the same code'),
    settings={
        'model.name': ('vit_b16', 'the ViT-B_16 model config: 768 wide, 12 blocks, 12 heads'),
        'model.dropout_rate': (0.0, 'the ViT-B_16 model config: dropout_rate 0.0'),
        'data.image_size': (384, "common.py's imagenet2012 preset: crop 384"),
        'init.reset_head': (True, 'checkpoint.py, load_pretrained: the head is the '
                            'initialised one (zeros) and pre_logits is dropped'),
        'optimizer': ('sgd', 'train.py: optax.sgd'),
        'momentum': (0.9, 'train.py: momentum=0.9'),
        'weight_decay': (0.0, 'train.py: no weight decay in the chain'),
        'grad_clip_norm': (1.0, 'common.py: grad_norm_clip 1.0 (train.py: '
                           'clip_by_global_norm, before the momentum)'),
        'learning_rate': (0.03, 'common.py: base_lr 0.03 at its batch of 512'),
        'lr_scaling': ('none', 'the rate is given for the batch itself'),
        'lr_schedule': ('cosine', "common.py: decay_type 'cosine'"),
        'warmup_steps': (500, 'common.py: warmup_steps 500'),
        'num_train_steps': (20_000, "common.py's imagenet2012 preset: total_steps 20,000"),
        'label_smoothing': (0.0, 'train.py: plain softmax cross-entropy'),
        'ema_decay': (0.0, 'train.py: no moving average'),
    },
    batch_size=512,
    top1=84.62,
    top1_where=('the repository\'s README, "Expected results": ViT-B_16 pre-trained on '
                'imagenet21k, fine-tuned on imagenet2012 by this code on 8 V100 GPUs '
                '(0.8462 and 0.8461 in two runs); that checkpoint is the original '
                "paper's, not an AugReg one, whose fine-tuned files are named "
                '"steps_20k-lr_0.01-res_384": the same length at a rate of 0.01'),
    deviations=(
        'the images are normalised by ImageNet\'s channel mean and deviation; the '
        'code scales them to [-1, 1], as the weights were pre-trained. Fine-tuning '
        'adapts the first layer to the difference',
        'evaluation takes the centred square of the shorter side resized to 384 '
        '(data.eval_crop_fraction 1.0); the code resizes the whole image to 384 x 384',
        'it trains on all of the training split; the code holds out its last 1% '
        '(train[:99%]) for validation',
        'the momentum is kept in float32; the code keeps it in bfloat16 '
        '(accumulator_dtype), to save memory',
        'the position embedding is resampled bilinearly with half-pixel centres '
        '(jax.image.resize); the code zooms it linearly with corners aligned '
        '(checkpoint.py: scipy.ndimage.zoom, order 1)',
    ),
)
__doc__ += paper.describe(PAPER)


def get_config():
  return paper.imagenet_fine_tuning(PAPER, augment='inception_crop')
