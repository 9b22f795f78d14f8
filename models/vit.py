"""Vision Transformer (Dosovitskiy et al. 2021) with a class token.

Pre-LN encoder blocks, learned position embedding, a linear head on the class
token; no dropout. vit_b16 at 224 px and 1000 classes has 86,567,656
parameters, the published count. Initialisers follow big_vision. Every
parameter carries logical axis names only:

  patch embedding kernel / bias  -> (None, None, None, 'embed') / ('embed',)
  class token, position embedding -> (None, None, 'embed')
  q, k, v kernel / bias          -> ('embed', 'heads', 'kv') / ('heads', 'kv')
  attention output kernel / bias -> ('heads', 'kv', 'embed') / ('embed',)
  MLP in kernel / bias           -> ('embed', 'mlp') / ('mlp',)
  MLP out kernel / bias          -> ('mlp', 'embed') / ('embed',)
  LayerNorm scale / bias         -> ('embed',)
  head kernel / bias             -> ('embed', 'classes') / ('classes',)
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import conv_forms
from models import drop_path as drop_path_lib
from models import remat as remat_lib

_lp = nn.with_logical_partitioning
# The residual stream is pinned to batch sharding only. Its feature axis is
# deliberately not 'embed': a rule that shards parameters' 'embed' over the
# mesh axis that also carries 'batch' (FSDP) would name one mesh axis twice.
# Replicated features between blocks are also what tensor parallelism wants.
_RESIDUAL_AXES = ('batch', None, None)


def _layer_norm(dtype: Any, name: str | None = None) -> nn.LayerNorm:
  return nn.LayerNorm(
      epsilon=1e-6, dtype=dtype, param_dtype=jnp.float32,
      scale_init=_lp(nn.initializers.ones, ('embed',)),
      bias_init=_lp(nn.initializers.zeros, ('embed',)), name=name)


class _Projection(nn.Module):
  """einsum(x, kernel) + bias, with a multi-axis kernel named axis by axis.

  nn.DenseGeneral would do, except that it initialises a flattened 2-D kernel,
  and under a mesh the 3-name logical constraint then fails on a rank-2 array.
  """
  equation: str
  kernel_shape: tuple[int, ...]
  kernel_axes: tuple[str, ...]
  num_in_axes: int  # leading kernel axes contracted with x
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    n = self.num_in_axes
    rank = len(self.kernel_shape)
    init = nn.initializers.xavier_uniform(
        in_axis=tuple(range(n)), out_axis=tuple(range(n, rank)))
    kernel = self.param('kernel', _lp(init, self.kernel_axes),
                        self.kernel_shape, jnp.float32)
    bias = self.param('bias', _lp(nn.initializers.zeros, self.kernel_axes[n:]),
                      self.kernel_shape[n:], jnp.float32)
    y = jnp.einsum(self.equation, x, kernel.astype(self.dtype))
    return y + bias.astype(self.dtype)


class SelfAttention(nn.Module):
  """Multi-head self-attention; softmax runs in float32 whatever the dtype."""
  num_heads: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    hidden = x.shape[-1]
    heads_kv = (self.num_heads, hidden // self.num_heads)
    q, k, v = (
        _Projection('btd,dnh->btnh', (hidden, *heads_kv),
                    ('embed', 'heads', 'kv'), 1, self.dtype, name=name)(x)
        for name in ('query', 'key', 'value'))
    y = jax.nn.dot_product_attention(q, k, v)  # [B, T, heads, kv]
    return _Projection('btnh,nhd->btd', (*heads_kv, hidden),
                       ('heads', 'kv', 'embed'), 2, self.dtype, name='out')(y)


# The MLP's GELU: its tanh approximation (flax's default, big_vision's and
# the AugReg checkpoints'), or exact with erf (PyTorch's, so timm's).
GELUS = ('tanh', 'erf')


class MlpBlock(nn.Module):
  """Dense -> GELU -> dropout -> Dense -> dropout."""
  mlp_dim: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.0
  gelu: str = 'tanh'

  @nn.compact
  def __call__(self, x, deterministic: bool = True):
    hidden = x.shape[-1]
    # Tiny non-zero biases, as in big_vision, so no unit starts exactly dead.
    bias_init = nn.initializers.normal(stddev=1e-6)
    x = nn.Dense(
        self.mlp_dim, dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=_lp(nn.initializers.xavier_uniform(), ('embed', 'mlp')),
        bias_init=_lp(bias_init, ('mlp',)), name='fc1')(x)
    x = nn.gelu(x, approximate=self.gelu == 'tanh')
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = nn.Dense(
        hidden, dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=_lp(nn.initializers.xavier_uniform(), ('mlp', 'embed')),
        bias_init=_lp(bias_init, ('embed',)), name='fc2')(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)


class EncoderBlock(nn.Module):
  """Pre-LN transformer block: x + MHA(LN(x)), then x + MLP(LN(x)); each
  branch with dropout and stochastic depth in training."""
  num_heads: int
  mlp_dim: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.0
  drop_path: float = 0.0
  gelu: str = 'tanh'

  @nn.compact
  def __call__(self, x, train: bool = False):
    deterministic = not train
    y = SelfAttention(self.num_heads, self.dtype, name='attention')(
        _layer_norm(self.dtype, name='ln1')(x))
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    x = x + drop_path_lib.DropPath(self.drop_path)(y, deterministic=deterministic)
    y = MlpBlock(self.mlp_dim, self.dtype, self.dropout_rate, self.gelu, name='mlp')(
        _layer_norm(self.dtype, name='ln2')(x), deterministic)
    y = drop_path_lib.DropPath(self.drop_path)(y, deterministic=deterministic)
    return nn.with_logical_constraint(x + y, _RESIDUAL_AXES)


class ViT(nn.Module):
  """Vision Transformer with a class token; returns float32 logits.

  Attributes:
    num_classes: head outputs.
    patch_size: side of the square patches, in pixels.
    hidden_size: width of the residual stream ('embed').
    mlp_dim: hidden width of the MLP blocks ('mlp').
    num_heads: attention heads; must divide hidden_size.
    depth: number of encoder blocks.
    image_size: input side in pixels; fixes the position embedding's length.
    dtype: compute dtype; parameters are always float32.
    remat: 'none', 'full' or 'dots' (models/remat.py): what each block
      recomputes in the backward pass.
    dropout_rate: dropout after the embeddings, the attention output and
      both MLP layers, in training.
    drop_path_rate: stochastic depth of the last block; block i of n drops
      each residual branch with drop_path_rate * i / (n - 1) in training.
    gelu: the MLP's GELU, 'tanh' or 'erf' (GELUS).
  """
  num_classes: int
  patch_size: int = 16
  hidden_size: int = 768
  mlp_dim: int = 3072
  num_heads: int = 12
  depth: int = 12
  image_size: int = 224
  dtype: Any = jnp.float32
  remat: str = 'none'
  conv_form: str = 'xla'  # the patch embedding's (models/conv_forms.py)
  dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  gelu: str = 'tanh'

  @nn.compact
  def __call__(self, x, *, train: bool):
    self._check(x.shape)
    # `train` selects code paths, so it is static under remat (self is 0).
    block_cls = remat_lib.wrap(EncoderBlock, self.remat, static_argnums=(2,))

    x = nn.Conv(
        self.hidden_size, (self.patch_size, self.patch_size),
        strides=(self.patch_size, self.patch_size), padding='VALID',
        dtype=self.dtype, param_dtype=jnp.float32,
        kernel_init=_lp(nn.initializers.lecun_normal(),
                        (None, None, None, 'embed')),
        bias_init=_lp(nn.initializers.zeros, ('embed',)),
        conv_general_dilated=conv_forms.conv_function(self.conv_form),
        name='embedding')(jnp.asarray(x, self.dtype))
    batch = x.shape[0]
    x = jnp.reshape(x, (batch, -1, self.hidden_size))

    cls = self.param('cls', _lp(nn.initializers.zeros, (None, None, 'embed')),
                     (1, 1, self.hidden_size), jnp.float32)
    x = jnp.concatenate(
        [jnp.tile(cls.astype(self.dtype), (batch, 1, 1)), x], axis=1)
    pos = self.param(
        'pos_embedding',
        _lp(nn.initializers.normal(stddev=self.hidden_size**-0.5),
            (None, None, 'embed')),
        (1, x.shape[1], self.hidden_size), jnp.float32)
    x = nn.with_logical_constraint(x + pos.astype(self.dtype), _RESIDUAL_AXES)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)

    rates = drop_path_lib.linear_rates(self.drop_path_rate, self.depth)
    for i in range(self.depth):
      x = block_cls(self.num_heads, self.mlp_dim, self.dtype, self.dropout_rate,
                    rates[i], self.gelu, name=f'encoderblock_{i}')(x, train)
    x = _layer_norm(self.dtype, name='encoder_norm')(x)

    # The head reads the class token in float32; zero-init (big_vision) makes
    # the first logits uniform.
    return nn.Dense(
        self.num_classes, dtype=jnp.float32, param_dtype=jnp.float32,
        kernel_init=_lp(nn.initializers.zeros, ('embed', 'classes')),
        bias_init=_lp(nn.initializers.zeros, ('classes',)),
        name='head')(x[:, 0].astype(jnp.float32))

  def _check(self, shape):
    """One-line errors for shapes that would otherwise fail deep inside."""
    remat_lib.check_mode(self.remat)
    problem = (heads_problem(self.hidden_size, self.num_heads) or
               patch_problem(self.patch_size, self.image_size))
    if problem:
      raise ValueError(problem)
    if tuple(shape[1:3]) != (self.image_size, self.image_size):
      raise ValueError(f'expected {self.image_size}x{self.image_size} images '
                       f'(the model was built for that size), got {shape}')


# The model's own rules on its sizes, which config validation asks too
# (through registry.size_problems), so that a config is refused before any
# work starts. Each returns why in one line, or None.
def heads_problem(hidden_size: int, num_heads: int) -> str | None:
  if hidden_size % num_heads:
    return f'num_heads={num_heads} does not divide hidden_size={hidden_size}'
  return None


def patch_problem(patch_size: int, image_size: int) -> str | None:
  if image_size % patch_size:
    return f'patch_size={patch_size} does not divide image_size={image_size}'
  return None


# Published sizes: hidden, mlp, heads, depth.
VARIANTS = {
    'ti': dict(hidden_size=192, mlp_dim=768, num_heads=3, depth=12),
    's': dict(hidden_size=384, mlp_dim=1536, num_heads=6, depth=12),
    'b': dict(hidden_size=768, mlp_dim=3072, num_heads=12, depth=12),
    'l': dict(hidden_size=1024, mlp_dim=4096, num_heads=16, depth=24),
    'h': dict(hidden_size=1280, mlp_dim=5120, num_heads=16, depth=32),
    # Zhai et al. 2022, "Scaling Vision Transformers", Table 2: ViT-g and
    # ViT-G. 'bigg' for G, since names must not differ by case alone (the
    # name OpenCLIP gives the same shape).
    'g': dict(hidden_size=1408, mlp_dim=6144, num_heads=16, depth=40),
    'bigg': dict(hidden_size=1664, mlp_dim=8192, num_heads=16, depth=48),
}


def vit(variant: str, patch_size: int, **kwargs) -> ViT:
  """The published ViT variant ('ti', 's', 'b', 'l', 'h', 'g', 'bigg'); kwargs override."""
  return ViT(patch_size=patch_size, **{**VARIANTS[variant], **kwargs})
