"""Every recipe's train and eval steps lower for CUDA here, without a GPU.

jax lowers a program for another platform without its hardware
(`trace(...).lower(lowering_platforms=('cuda',))`). Each case builds the
recipe's experiment as a GPU run builds it (model.dtype and model.conv_form
'auto' resolve as on a GPU: bfloat16 and XLA's convolution) with the
project's own step builders and shardings, on 8 emulated devices, at tiny
widths and 32 px (28 for patches of 14), and lowers without compiling. What this catches before a
GPU is at hand: an op that has no CUDA lowering or a custom call only the CPU
provides, a float32 matmul or convolution in the bfloat16 path, and a
sharding that does not carry over to the CUDA program. What only a GPU can
show (XLA:GPU's compile, memory and speed) is in docs/gpus.md.
"""

import collections
import math
import re
import tempfile

import jax
from jax.extend.mlir import ir
import pytest

from cli import describe
from configs import finetune_resnet50, finetune_vit_b16, folder, imagenet_resnet50, imagenet_resnet50_lars
from configs import imagenet_vit_b16, imagenet_vit_bigg14, imagenet_vit_g14
from configs import imagenet_vit_l16, quickstart
from models import registry
from trainer import evaluate
from trainer import experiment
from trainer import specs
from trainer.engines import spmd

GLOBAL_BATCH = 16
IMAGE_SIZE = 32
NUM_CLASSES = 10

# id: (recipe, mesh (data, fsdp, tensor) or None for the recipe's own,
# mesh.shard_update). The recipes' own meshes are data parallel (ResNets,
# ViT-B/16, ViT-g/14 with accumulation), FSDP (ViT-L/16) and data x tensor
# (ViT-G/14); every recipe keeps its sharding rules
# (FSDP_TENSOR), so the other parallelisms are changes of mesh, as
# docs/parallelism.md selects them.
CASES = {
    'resnet50': (imagenet_resnet50, None, False),
    'resnet50_lars': (imagenet_resnet50_lars, None, False),
    'vit_b16': (imagenet_vit_b16, None, False),
    'vit_l16': (imagenet_vit_l16, None, False),
    'finetune_vit_b16': (finetune_vit_b16, None, False),
    'finetune_resnet50': (finetune_resnet50, None, False),
    'quickstart': (quickstart, None, False),
    'folder': (folder, None, False),
    'quickstart shard_update': (quickstart, (8, 1, 1), True),
    'vit_b16 shard_update': (imagenet_vit_b16, (8, 1, 1), True),
    'quickstart fsdp=8': (quickstart, (1, 8, 1), False),
    'quickstart fsdp=4 x tensor=2': (quickstart, (1, 4, 2), False),
    'vit_l16 fsdp=4 x tensor=2': (imagenet_vit_l16, (1, 4, 2), False),
    'vit_g14': (imagenet_vit_g14, None, False),
    'vit_bigg14': (imagenet_vit_bigg14, None, False),
    'vit_bigg14 data=2 x fsdp=2 x tensor=2': (imagenet_vit_l16, (2, 2, 2), True),
}
# Cases of another model than the recipe's: ViT-G/14 (patches of 14, at 28
# px) on all three axes with ZeRO-1, as the ViT-L/16 recipe trains it.
MODEL_OF_CASE = {'vit_bigg14 data=2 x fsdp=2 x tensor=2': 'vit_bigg14'}
# Where the bfloat16 path meets float32 operands, and why; every other
# matmul and convolution of a step takes bfloat16 operands.
# - The classifier head computes in float32 on purpose (models/resnet.py,
#   models/vit.py): its matmul in the forward pass, and in the train step the
#   two of its gradient (kernel and input).
# - ViT attention's softmax runs in float32 (models/vit.py): the scores
#   matmul (jax.nn.dot_product_attention, XLA form) returns float32, so in
#   the train step its gradient reaches the two transposed matmuls (towards
#   queries and keys) as a float32 operand beside bfloat16 keys or queries.
HEAD = '/head/'
SCORES = '/attention/vmap(BTNH,BSNH->BNTS)/'
FLOAT32_HEAD_OPS = {'train': 3, 'eval': 1}
# Custom calls that name a CPU library or runtime: XLA:GPU has no such target.
CPU_ONLY_TARGET = re.compile(r'cpu|lapack|ducc|xnnpack|onednn|mkl', re.IGNORECASE)

# location: the op's name stack, which names the flax module it belongs to.
Op = collections.namedtuple('Op', 'name operand_types location target')


def image_size(model_name: str) -> int:
  """IMAGE_SIZE, or the nearest size that patches of 14 tile (28)."""
  return 28 if registry.size_problems(model_name, width=0, image_size=IMAGE_SIZE) else IMAGE_SIZE


def _tiny_gpu_config(recipe, mesh, shard_update, model=None):
  config = recipe.get_config()
  config.model.name = model or config.model.name
  config.data.source, config.data.augment = 'synthetic', 'none'
  config.data.num_synthetic_classes = NUM_CLASSES
  config.data.num_synthetic_examples = GLOBAL_BATCH
  config.data.image_size = image_size(config.model.name)
  config.batch_size = GLOBAL_BATCH
  is_vit = config.model.name.startswith('vit_')
  if mesh is not None:
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh
  # One head of 64 for each way the tensor axis splits them.
  config.model.width = 64 * max(config.mesh.tensor, 1) if is_vit else 8
  config.model.depth = 1 if is_vit else 0
  # The recipes' batch-norm groups (32, 64) shrink to one group a device.
  config.model.bn_group_size = min(config.model.bn_group_size, GLOBAL_BATCH // 8)
  # The recipes' micro-batches shrink to whole examples a device (ViT-G/14's
  # eight to two).
  config.grad_accum_steps = math.gcd(config.grad_accum_steps, GLOBAL_BATCH // 8)
  config.mesh.shard_update = shard_update
  return config


def _build_as_on_a_gpu(config):
  """The experiment with 'auto' resolved as on a GPU: models/registry.py and
  trainer/experiment.py ask jax.default_backend()."""
  with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as workdir:
    patch.setattr(jax, 'default_backend', lambda: 'gpu')
    return experiment.build_experiment(config, workdir)


def _ops(module) -> list[Op]:
  """Every operation of a lowered module, nested ones included."""
  found = []

  def visit(op):
    target = (ir.StringAttr(op.attributes['call_target_name']).value
              if 'call_target_name' in op.attributes else '')
    # The location's name stack, e.g. "jit(train_step)/jvp(ViT)/head/dot_general".
    names = re.match(r'loc\("([^"]*)"', str(op.location))
    found.append(Op(op.name, [str(v.type) for v in op.operands],
                    names.group(1) if names else str(op.location), target))
    return ir.WalkResult.ADVANCE

  module.operation.walk(visit)
  return found


def _lower_for_cuda(jitted, *args):
  lowered = jitted.trace(*args).lower(lowering_platforms=('cuda',))
  return lowered.compiler_ir('stablehlo'), lowered.as_text()


@pytest.fixture(scope='module', params=list(CASES))
def lowered(request):
  """(the case's experiment, {'train': (ops, text), 'eval': (ops, text)}) of
  its steps lowered for CUDA."""
  exp = _build_as_on_a_gpu(_tiny_gpu_config(*CASES[request.param],
                                            MODEL_OF_CASE.get(request.param)))
  batch = specs.batch_spec(GLOBAL_BATCH, exp.config.data.image_size, exp.batch_sharding)
  eval_batch = {**batch, 'mask': jax.ShapeDtypeStruct((GLOBAL_BATCH,), bool,
                                                       sharding=exp.batch_sharding)}
  steps = {}
  with exp.tracing_context():
    for name, jitted, step_batch in (('train', spmd.jit_train_step(exp), batch),
                                     ('eval', evaluate.compile_eval_step(exp), eval_batch)):
      module, text = _lower_for_cuda(jitted, exp.abstract_state, step_batch)
      steps[name] = (_ops(module), text)
  return exp, steps


def test_every_recipe_is_lowered():
  covered = {f'configs/{recipe.__name__.split(".")[-1]}.py' for recipe, _, _ in CASES.values()}
  assert covered == {path for path, _ in describe.recipes()}


def test_auto_resolves_to_bfloat16_and_xla_convolutions_as_on_a_gpu(lowered):
  exp, _ = lowered
  assert exp.model.dtype == jax.numpy.bfloat16
  assert exp.model.conv_form == 'xla'


def test_train_and_eval_steps_lower_for_cuda_over_all_8_devices(lowered):
  _, steps = lowered
  for name, (_, text) in steps.items():
    assert 'mhlo.num_partitions = 8' in text, name


def test_the_cuda_program_keeps_the_mesh_and_splits_the_state_over_it(lowered):
  exp, steps = lowered
  mesh = ', '.join(f'"{axis}"={size}' for axis, size in exp.mesh.shape.items())
  for name, (_, text) in steps.items():
    assert f'sdy.mesh @mesh = <[{mesh}]>' in text, name
  _, text = steps['train']
  # Parameters split over fsdp and tensor wherever those axes have devices.
  for axis, size in exp.mesh.shape.items():
    if axis != 'data' and size > 1:
      assert re.search(rf'sdy.sharding<@mesh, \[[^\]]*\{{"{axis}"\}}', text), axis
  if exp.config.mesh.shard_update:
    # The update's layout (state.split_over_data) adds data to a dimension
    # after the parameter's own axis; a batch puts data first.
    assert re.search(r'sdy.sharding_constraint %\w+ <@mesh, [^>]*", "data"\}', text)


def test_lowered_steps_call_no_cpu_only_custom_call(lowered):
  _, steps = lowered
  for name, (ops, _) in steps.items():
    targets = {op.target for op in ops if op.name == 'stablehlo.custom_call'}
    cpu_only = sorted(t for t in targets if CPU_ONLY_TARGET.search(t))
    assert not cpu_only, f'{name} step calls CPU-only targets {cpu_only}'


def _float_type(tensor_type: str) -> str:
  return tensor_type.rsplit('x', 1)[-1].rstrip('>')


def _matmuls_and_convolutions(ops) -> dict[str, list[Op]]:
  """The step's dot_generals and convolutions: the head's, the attention
  scores' with a float32 operand, and the rest (the body)."""
  kinds = {'head': [], 'score_gradient': [], 'body': []}
  for op in ops:
    if op.name not in ('stablehlo.dot_general', 'stablehlo.convolution'):
      continue
    if HEAD in op.location:
      kinds['head'].append(op)
    elif SCORES in op.location and 'f32' in map(_float_type, op.operand_types):
      kinds['score_gradient'].append(op)
    else:
      kinds['body'].append(op)
  return kinds


def test_every_matmul_and_convolution_of_the_body_takes_bfloat16_operands(lowered):
  _, steps = lowered
  for name, (ops, _) in steps.items():
    body = _matmuls_and_convolutions(ops)['body']
    assert body, f'{name} step: no matmul or convolution found'
    leaks = [op for op in body
             if any(_float_type(t) != 'bf16' for t in op.operand_types)]
    assert not leaks, f'{name} step computes in float32: {leaks[:3]}'


def test_the_head_is_the_float32_forward_matmul_and_in_training_its_two_gradients(lowered):
  _, steps = lowered
  for name, (ops, _) in steps.items():
    head = _matmuls_and_convolutions(ops)['head']
    assert len(head) == FLOAT32_HEAD_OPS[name], (name, head)
    assert all(_float_type(t) == 'f32' for op in head for t in op.operand_types), head


def test_only_the_attention_scores_gradients_meet_a_float32_operand_two_per_block(lowered):
  exp, steps = lowered
  blocks = exp.config.model.depth if exp.config.model.name.startswith('vit_') else 0
  for name, (ops, _) in steps.items():
    gradients = _matmuls_and_convolutions(ops)['score_gradient']
    assert len(gradients) == (2 * blocks if name == 'train' else 0), (name, gradients)
    for op in gradients:  # the scores' float32 gradient, bfloat16 queries or keys
      assert 'transpose(' in op.location, op
      assert sorted(map(_float_type, op.operand_types)) == ['bf16', 'f32'], op
