"""ResNet-50 v1.5 on ImageNet-1k at 224 px: LARS at batch 4096, MLPerf's reference.

MLPerf Training's ResNet-50 reference run at batch 4096: LARS (You et al.
2017) with its trust ratio and weight decay skipping batch norm and biases,
a peak rate of 10 reached by a linear 5-epoch warm-up, then polynomial decay
of power 2 (lr_schedule=poly), label smoothing 0.1, 42 epochs; MLPerf's
quality target is 75.9% top-1. Inception crop + flip for training, centre
crop 87.5% for evaluation, evaluated every 4 epochs as MLPerf does.

    python main.py --config=configs/imagenet_resnet50_lars.py --workdir=runs/r50_lars \\
        --config.data.dir=/data/tensorflow_datasets

4096 is 512 per GPU on one host of 8; where that does not fit (80 GB GPUs,
docs/gpus.md), add --config.grad_accum_steps=2: 256 per device at a time,
which the batch-norm groups of 64 still divide.

Larger batches: the reference's learning-rate schedule peaks at 10.0 below
a batch of 16384, at 25.0 with 5 warm-up epochs from 16384, and at 31.2 with
25 warm-up epochs from 32768 (--config.batch_size=32768
--config.learning_rate=31.2 --config.warmup_epochs=25); the reference gives
no epochs or weight decay for those batches, so they are yours to choose.
"""

from configs import default
from configs import paper

PAPER = paper.Paper(
    source=('MLPerf Training v1.0 ResNet-50 reference, github.com/mlcommons/training, '
            'image_classification, its TensorFlow 2 instructions (the "On TPU-V3-64" command, '
            'batch 4096) and its LARS schedule, optimiser and training flags; '
            'LARS: You, Gitman, Ginsburg 2017, "Large Batch Training of Convolutional '
            'Networks", arXiv:1708.03888'),
    settings={
        'model.name': ('resnet50', 'README: ResNet v1.5'),
        'data.image_size': (224, 'README: 224 px ImageNet'),
        'optimizer': ('lars', '--optimizer=LARS; the reference skips batch norm and biases '
                      '(skip_list) in the trust ratio and the weight decay'),
        'trust_coefficient': (0.001, 'the reference optimiser: eeta=0.001'),
        'momentum': (0.9, '--momentum=0.9'),
        'nesterov': (False, 'the reference optimiser: use_nesterov=False'),
        'learning_rate': (10.0, '--base_learning_rate=10.0, the peak rate itself'),
        'lr_scaling': ('none', 'the reference sets the peak per batch, '
                       'not per 256 images'),
        'warmup_epochs': (5.0, '--warmup_epochs=5, linear from 0'),
        'lr_schedule': ('poly', '--lr_schedule=polynomial'),
        'lr_poly_power': (2.0, 'the reference schedule: PolynomialDecay, power=2.0'),
        'num_epochs': (42.0, '--train_epochs=42'),
        'weight_decay': (2e-4, '--weight_decay=0.0002'),
        'label_smoothing': (0.1, '--label_smoothing=0.1'),
        'model.bn_group_size': (64, '4096 over --num_replicas=64: each replica '
                                "normalises its own 64 images (Keras's batch norm "
                                'under a distribution strategy)'),
    },
    batch_size=4096,
    top1=75.9,
    top1_where=('MLPerf\'s quality target, the reference\'s "Quality target": '
                'a run ends when an evaluation reaches it; the reference publishes no '
                'mean of runs'),
    deviations=(
        'the decay ends at 0 at the last step; the reference\'s ends at 0.0001 one '
        'step later (the reference schedule\'s end rate and decay steps + 1): 1e-5 of the '
        'peak, so lr_schedule=poly needs no end-rate key',
        'the trust ratio divides by |g + wd * w| (optax.lars); the reference\'s by '
        '|g| + wd * |w|, which is never smaller: this ratio is the same or larger',
        'the reference crops within the images\' bounding boxes (README, "Data '
        'preprocessing", Stage 2); tfds imagenet2012 has no boxes, so the crops are '
        'drawn from the whole image; the "basic color augmentation" the README also '
        'names is not done',
        'the reference evaluates every 4 epochs from an offset (--eval_offset_epochs=2), '
        'this recipe every 4 epochs from the start and at the end',
    ),
)
__doc__ += paper.describe(PAPER)

STEPS_PER_EPOCH = 1_281_167 // PAPER.batch_size  # 312 whole batches of ImageNet's training images


def get_config():
  config = paper.apply(default.get_config(), PAPER)
  config.batch_size = PAPER.batch_size
  config.model.dtype = 'auto'  # bfloat16 on GPUs and TPUs, float32 on CPU
  config.data.source = 'tfds'
  config.data.name = 'imagenet2012'
  config.data.train_split = 'train'
  config.data.eval_split = 'validation'  # all 50,000 images, pad + mask
  config.data.augment = 'inception_crop'
  config.data.eval_crop_fraction = 0.875  # resize to 256, centre 224
  config.log_every_steps = 100
  config.eval_every_steps = 4 * STEPS_PER_EPOCH  # every 4 epochs, as MLPerf evaluates
  config.checkpoint.every_steps = 1000
  config.checkpoint.every_minutes = 30.0
  return config
