"""The large ViTs' recipes run the mesh the planner names for them: each
recipe's mesh, ZeRO-1, remat, accumulation and batch against the committed
64-GPU, 80 GB plan (results/plan/large_vits_64.jsonl, written by
benchmarks/large_vit_plans.py)."""

import importlib
import json
import os

import pytest

from tests.helpers import REPO

PLANS = os.path.join(REPO, 'results', 'plan', 'large_vits_64.jsonl')
RECIPES = {'vit_g14': 'imagenet_vit_g14', 'vit_bigg14': 'imagenet_vit_bigg14'}


def _plan(model: str) -> dict:
  """The newest committed plan of `model` on 64 GPUs of 80 GB."""
  with open(PLANS) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [r for r in records if (r['model'], r['devices'], r['device_gb']) ==
          (model, 64, 80.0)][-1]


@pytest.mark.parametrize('model', sorted(RECIPES))
def test_the_recipe_is_the_64_gpu_plans_answer(model):
  recipe = importlib.import_module(f'configs.{RECIPES[model]}')
  config = recipe.get_config()
  best = _plan(model)['best']
  assert config.model.name == model
  assert config.batch_size == _plan(model)['global_batch']
  axes = {'data': config.mesh.data, 'fsdp': config.mesh.fsdp, 'tensor': config.mesh.tensor}
  fixed = 1
  for size in axes.values():
    fixed *= size if size > 0 else 1
  resolved = {axis: (64 // fixed if size == -1 else size) for axis, size in axes.items()}
  assert resolved == {axis: best[f'mesh.{axis}'] for axis in axes}
  assert config.mesh.shard_update == best['mesh.shard_update']
  assert config.model.remat == best['model.remat']
  assert config.grad_accum_steps == best['grad_accum_steps']
  # The recipe's account of its memory is the plan's figure.
  assert f'{best["peak"] / 2**30:.1f} GiB per device' in recipe.__doc__
