"""ViT-g/14 (1.0B parameters) on ImageNet-1k, on the planned mesh for 64 x 80 GB.

ViT-g/14 of Zhai et al. 2022 at 224 px, on the mesh the planner names for
64 GPUs of 80 GB: data parallel over every device, two micro-batches of 16
images a GPU (batch 2048).

The ViT-L/16 recipe's training (AdamW, DeiT's augmentation and schedule,
its learning rate per 256 images, not tuned for this model: the paper trains
on JFT-3B) with the larger model. The mesh, remat and accumulation are
--mode=plan --config.plan.parallelism=mesh's answer for 64 GPUs of 80 GB in
hosts of 8 (benchmarks/large_vit_plans.py; its record in
results/plan/large_vits_64.jsonl, which tests/test_large_vit_recipes.py
holds this file to): 54.7 GiB per device by XLA's memory analysis, within
the 60.35 GiB budget of an 80 GB GPU; its step time is a prediction. On
other devices or another batch, plan again (docs/mesh-planner.md).
"""

from configs import imagenet_vit_l16


def get_config():
  config = imagenet_vit_l16.get_config()
  config.model.name = 'vit_g14'
  config.batch_size = 2048
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = -1, 1, 1
  config.mesh.shard_update = False
  config.model.remat = 'none'
  config.grad_accum_steps = 2
  return config
