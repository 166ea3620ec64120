"""A decoder-only transformer (GPT-style, pre-LN, tied embeddings) with a KV cache.

Shape letters: B batch, T sequence, S cache length, D d_model, N heads, H head dim, V vocab.
Params carry logical axis names; `sharding.RULES` maps them onto the (data, model) mesh.

`Transformer` is a model as `models.protocol` describes it: its one field is the nested
`ModelConfig` (every `architecture/*` key), so `configure(Transformer)` builds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen import spmd

from tcl.jobs.errors import ConfigError
from tcl.jobs.models.config import ModelConfig
from tcl.jobs.sharding import RULES

Dtype = Any


def _init(axes: tuple[str | None, ...], std: float = 0.02) -> Any:
    return nn.with_logical_partitioning(nn.initializers.normal(std), axes)


class Attention(nn.Module):
    cfg: ModelConfig
    dtype: Dtype

    @nn.compact
    def __call__(
        self,
        x_BTD: jax.Array,
        pos_BT: jax.Array | None,
        valid_BT: jax.Array | None,
        decode: bool,
    ) -> jax.Array:
        """`pos_BT` and `valid_BT` None: positions 0..T-1, every token real (training), so
        plain causal attention (``is_causal``: no mask tensor, and cuDNN skips the masked half)."""
        c = self.cfg

        # Explicit kernels (not DenseGeneral, whose flattened init breaks logical sharding).
        def kernel(name: str, shape: tuple[int, ...], axes: tuple[str, ...]) -> jax.Array:
            w: jax.Array = self.param(name, _init(axes), shape)
            return w.astype(self.dtype)

        qkv = (c.d_model, c.n_heads, c.head_dim)
        x = x_BTD.astype(self.dtype)
        q_BTNH, k_BTNH, v_BTNH = (
            jnp.einsum("btd,dnh->btnh", x, kernel(n, qkv, ("embed", "heads", "kv")))
            for n in ("query", "key", "value")
        )
        B, T = x_BTD.shape[:2]
        causal = pos_BT is None and valid_BT is None and not decode
        if pos_BT is None:
            pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if valid_BT is None:
            valid_BT = jnp.ones((B, T), bool)
        if decode:
            k_BSNH, v_BSNH, kpos_BS, kvalid_BS = self._update_cache(
                k_BTNH, v_BTNH, pos_BT, valid_BT
            )
        else:
            k_BSNH, v_BSNH, kpos_BS, kvalid_BS = k_BTNH, v_BTNH, pos_BT, valid_BT
        mask = None
        if not causal:
            # Causal by position, keys must be real tokens; a query may always see itself.
            mask_BTS = (kpos_BS[:, None, :] <= pos_BT[:, :, None]) & kvalid_BS[:, None, :]
            if not decode:
                mask_BTS = mask_BTS | jnp.eye(T, dtype=bool)[None]
            mask = mask_BTS[:, None]
        out_BTNH = jax.nn.dot_product_attention(
            q_BTNH,
            k_BSNH.astype(q_BTNH.dtype),
            v_BSNH.astype(q_BTNH.dtype),
            mask=mask,
            is_causal=causal,
            implementation=cast(Literal["xla", "cudnn"] | None, c.attention_impl),
        )
        w_out = kernel("out", (c.n_heads, c.head_dim, c.d_model), ("heads", "kv", "embed"))
        return jnp.einsum("btnh,nhd->btd", out_BTNH, w_out)

    def _update_cache(
        self, k_BTNH: jax.Array, v_BTNH: jax.Array, pos_BT: jax.Array, valid_BT: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        B, T, N, H = k_BTNH.shape
        S = self.cfg.block_size
        ck = self.variable("cache", "key", jnp.zeros, (B, S, N, H), k_BTNH.dtype)
        cv = self.variable("cache", "value", jnp.zeros, (B, S, N, H), v_BTNH.dtype)
        cpos = self.variable("cache", "pos", lambda: jnp.full((B, S), S, jnp.int32))
        cvalid = self.variable("cache", "valid", jnp.zeros, (B, S), bool)
        idx = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
        if self.is_initializing():
            return k_BTNH, v_BTNH, pos_BT, valid_BT
        i = idx.value
        ck.value = jax.lax.dynamic_update_slice(ck.value, k_BTNH, (0, i, 0, 0))
        cv.value = jax.lax.dynamic_update_slice(cv.value, v_BTNH, (0, i, 0, 0))
        cpos.value = jax.lax.dynamic_update_slice(cpos.value, pos_BT.astype(jnp.int32), (0, i))
        cvalid.value = jax.lax.dynamic_update_slice(cvalid.value, valid_BT, (0, i))
        idx.value = i + T
        return ck.value, cv.value, cpos.value, cvalid.value


class Block(nn.Module):
    cfg: ModelConfig
    dtype: Dtype

    @nn.compact
    def __call__(
        self,
        x_BTD: jax.Array,
        pos_BT: jax.Array | None,
        valid_BT: jax.Array | None,
        decode: bool,
        deterministic: bool,
    ) -> jax.Array:
        c = self.cfg
        h = nn.LayerNorm(dtype=self.dtype, name="ln1")(x_BTD)
        h = Attention(c, self.dtype, name="attn")(h, pos_BT, valid_BT, decode)
        x_BTD = x_BTD + nn.Dropout(c.dropout)(h, deterministic=deterministic)
        h = nn.LayerNorm(dtype=self.dtype, name="ln2")(x_BTD)
        h = nn.Dense(
            c.d_model * c.mlp_ratio,
            dtype=self.dtype,
            kernel_init=_init(("embed", "mlp")),
            name="fc",
        )(h)
        h = nn.gelu(h)
        h = nn.Dense(c.d_model, dtype=self.dtype, kernel_init=_init(("mlp", "embed")), name="proj")(
            h
        )
        x_BTD = x_BTD + nn.Dropout(c.dropout)(h, deterministic=deterministic)
        out_BTD: jax.Array = spmd.with_logical_constraint(x_BTD, ("batch", "length", "embed"))
        return out_BTD


def compute_dtype(name: str) -> Any:
    if name == "auto":
        return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    try:
        return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]
    except KeyError:
        raise ConfigError(f"unknown dtype {name!r}", key="architecture/dtype") from None


class Transformer(nn.Module):
    """tokens [B, T] → logits [B, T, V] (float32)."""

    cfg: ModelConfig = dataclasses.field(default_factory=ModelConfig)

    @property
    def block_size(self) -> int:
        return self.cfg.block_size

    @property
    def sharding(self) -> tuple[tuple[str, str | None], ...]:
        return RULES

    @property
    def dtype(self) -> Any:
        return compute_dtype(self.cfg.dtype)

    def flops_per_token(self, n_params: int) -> float:
        return flops_per_token(self.cfg, n_params)

    def check_mesh(self, model_axis: int) -> None:
        """Every dimension the `model` axis splits must divide by its size."""
        c = self.cfg
        dims = {
            "architecture/n_heads": c.n_heads,
            "architecture/vocab_size": c.vocab_size,
            "architecture/mlp_ratio": c.d_model * c.mlp_ratio,
        }
        for key, dim in dims.items():
            if dim % model_axis:
                raise ConfigError(
                    f"{dim} is not divisible by mesh/model_parallel {model_axis}", key=key
                )

    @nn.compact
    def __call__(
        self,
        tokens_BT: jax.Array,
        pos_BT: jax.Array | None = None,
        valid_BT: jax.Array | None = None,
        decode: bool = False,
        deterministic: bool = True,
    ) -> jax.Array:
        c = self.cfg
        dtype = self.dtype
        T = tokens_BT.shape[1]
        # Blocks get None for a plain batch (positions 0..T-1, all real): causal attention.
        pos_T = pos_BT if pos_BT is not None else jnp.arange(T, dtype=jnp.int32)[None]
        embed = nn.Embed(
            c.vocab_size,
            c.d_model,
            dtype=dtype,
            embedding_init=_init(("vocab", "embed")),
            name="embed",
        )
        wpe = self.param("pos_embed", _init((None, "embed"), 0.01), (c.block_size, c.d_model))
        x_BTD = embed(tokens_BT) + jnp.take(wpe, pos_T, axis=0).astype(dtype)
        x_BTD = nn.Dropout(c.dropout)(x_BTD, deterministic=deterministic)
        block = nn.remat(Block, static_argnums=(4, 5)) if c.remat else Block
        for i in range(c.n_layers):
            x_BTD = block(c, dtype, name=f"block_{i}")(
                x_BTD, pos_BT, valid_BT, decode, deterministic
            )
        x_BTD = nn.LayerNorm(dtype=dtype, name="ln_f")(x_BTD)
        logits_BTV = embed.attend(x_BTD)
        return logits_BTV.astype(jnp.float32)


def param_count(params: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))


def flops_per_token(cfg: ModelConfig, n_params: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·T·D (attention scores, PaLM appendix B)."""
    return 6.0 * n_params + 12.0 * cfg.n_layers * cfg.block_size * cfg.d_model
