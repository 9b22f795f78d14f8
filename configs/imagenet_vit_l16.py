"""ViT-L/16 (304M parameters) on ImageNet-1k at 224 px, sharded with FSDP.

The ViT-B/16 recipe with the large model: parameters and AdamW state (about
3.6 GB in float32) are split over all devices (mesh.fsdp=-1) instead of
replicated, and the encoder blocks recompute their elementwise activations
(remat=dots). Add tensor parallelism on machines with fast links, e.g.
--config.mesh.fsdp=4 --config.mesh.tensor=2 on 8 GPUs. Not run on a GPU here;
by XLA's memory analysis of the step compiled here its batch of 1024 on 8
devices (128 each) needs about 73 GiB per device, which fits a 141 GB GPU
but not an 80 GB one: there use --config.grad_accum_steps=2 (docs/gpus.md).
"""

from configs import imagenet_vit_b16


def get_config():
  config = imagenet_vit_b16.get_config()
  config.model.name = 'vit_l16'
  config.model.remat = 'dots'
  config.mesh.data = 1
  config.mesh.fsdp = -1
  config.mesh.tensor = 1
  config.learning_rate = 1.25e-4  # per 256 images; large ViTs want a lower rate
  return config
