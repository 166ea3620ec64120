"""Autoregressive decoding for `InferenceJob.rollout`, with or without a KV cache.

Prompts arrive left-padded ([B, P] tokens and a validity mask). A model that follows tcl's
KV-cache protocol (`__call__(tokens, pos_BT, valid_BT, decode=True)` with a mutable "cache"
collection, as the built-in GPT does) is prefilled once, then decodes one token per step in a
`lax.scan`. Any other causal model decodes without a cache: each step runs the whole fixed-size
buffer [B, P + N] (one compiled program) and reads the logits at the current position; the
padding mask is passed when the model takes one (`padding_mask` / `valid_BT`), otherwise the
model sees the padding tokens.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from tcl.jobs.models import protocol


def _pick(logits_BV: jax.Array, key: jax.Array, temperature: float, top_p: float) -> jax.Array:
    if temperature == 0.0:
        return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    scaled = logits_BV / temperature
    if top_p < 1.0:  # nucleus: keep the smallest set of tokens whose mass reaches top_p
        order = jnp.argsort(scaled, axis=-1)[:, ::-1]
        sorted_logits = jnp.take_along_axis(scaled, order, axis=-1)
        mass = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
        keep_sorted = (mass - jax.nn.softmax(sorted_logits, axis=-1)) < top_p
        keep = (
            jnp.zeros_like(keep_sorted)
            .at[jnp.arange(scaled.shape[0])[:, None], order]
            .set(keep_sorted)
        )
        scaled = jnp.where(keep, scaled, -jnp.inf)
    return jax.random.categorical(key, scaled).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7))
def generate_cached(
    model: Any,
    params: Any,
    tokens_BP: jax.Array,
    valid_BP: jax.Array,
    key: jax.Array,
    n_new: int,
    temperature: float,
    top_p: float,
) -> jax.Array:
    """Prefill the cache with the prompt, then decode `n_new` tokens one at a time."""
    pos_BP = jnp.maximum(jnp.cumsum(valid_BP, axis=1) - 1, 0).astype(jnp.int32)
    # No "cache" collection yet: the first decode call creates it (empty) and fills the prompt.
    logits, upd = model.apply(
        {"params": params}, tokens_BP, pos_BP, valid_BP, decode=True, mutable=["cache"]
    )
    first = _pick(logits[:, -1], jax.random.fold_in(key, 0), temperature, top_p)

    def body(carry: Any, i: jax.Array) -> Any:
        cache, tok_B, pos_B = carry
        logits, upd = model.apply(
            {"params": params, "cache": cache},
            tok_B[:, None],
            pos_B[:, None],
            jnp.ones_like(tok_B[:, None], bool),
            decode=True,
            mutable=["cache"],
        )
        nxt = _pick(logits[:, -1], jax.random.fold_in(key, i), temperature, top_p)
        return (upd["cache"], nxt, pos_B + 1), tok_B

    _, toks_NB = jax.lax.scan(
        body, (upd["cache"], first, pos_BP[:, -1] + 1), jnp.arange(1, n_new + 1)
    )
    out_BN: jax.Array = toks_NB.T
    return out_BN


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7))
def generate_uncached(
    model: Any,
    params: Any,
    tokens_BP: jax.Array,
    valid_BP: jax.Array,
    key: jax.Array,
    n_new: int,
    temperature: float,
    top_p: float,
) -> jax.Array:
    """Decode `n_new` tokens by running the whole buffer each step (causal models only)."""
    B, P = tokens_BP.shape
    buf_BL = jnp.concatenate([tokens_BP, jnp.zeros((B, n_new), jnp.int32)], axis=1)
    valid_BL = jnp.concatenate([valid_BP, jnp.ones((B, n_new), bool)], axis=1)
    kwargs = protocol.call_kwargs(model, valid_BT=valid_BL, deterministic=True)

    def body(buf_BL: jax.Array, i: jax.Array) -> Any:
        logits, _ = protocol.split_output(model.apply({"params": params}, buf_BL, **kwargs))
        last_BV = jax.lax.dynamic_index_in_dim(logits, P - 1 + i, axis=1, keepdims=False)
        nxt = _pick(last_BV, jax.random.fold_in(key, i), temperature, top_p)
        return jax.lax.dynamic_update_index_in_dim(buf_BL, nxt, P + i, axis=1), nxt

    _, toks_NB = jax.lax.scan(body, buf_BL, jnp.arange(n_new))
    out_BN: jax.Array = toks_NB.T
    return out_BN
