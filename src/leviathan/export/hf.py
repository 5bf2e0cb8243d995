"""Our LanguageModel as a `transformers` LlamaForCausalLM: config and weights.

The backbone is a Llama decoder (pre-norm RMSNorm, RoPE, SwiGLU, no biases, no GQA), so
the mapping is one-to-one except for two things:

* the input: every variant's V x D input table, materialised (`io.input_table()`: LEV and
  the MLPs are evaluated once for all ids), becomes `model.embed_tokens`; the untied head
  becomes `lm_head`, and `tied` sets `tie_word_embeddings` (no `lm_head` is written);
* RoPE layout: ours rotates interleaved pairs (x[2i], x[2i+1]) of each head, Llama's
  `rotate_half` rotates (x[i], x[i + hd/2]). Permuting the rows of q and k within each head
  (even rows first, then odd rows) turns one into the other; q.k is unchanged because both
  get the same permutation, and v/o are untouched.
"""

from __future__ import annotations

from typing import Any

import torch

from leviathan.model import LanguageModel, ModelConfig
from leviathan.vocab import VocabSpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def check_dtype(name: str) -> torch.dtype:
    """The torch dtype of an export dtype name; unknown names list the valid ones."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: use one of {', '.join(DTYPES)}") from None


def rope_row_permutation(head_dim: int) -> torch.Tensor:
    """Row order within a head that turns interleaved-pair RoPE into Llama's half rotation."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _permute_heads(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of a q or k projection [H * hd, D], each head's rows reordered for Llama."""
    hd = w.shape[0] // n_heads
    return w.view(n_heads, hd, -1)[:, rope_row_permutation(hd)].reshape(w.shape)


def llama_state_dict(model: LanguageModel) -> dict[str, torch.Tensor]:
    """The LlamaForCausalLM state dict of `model` (fp32, detached, contiguous)."""
    cfg = model.cfg
    D, H = cfg.d_model, cfg.n_heads
    with torch.no_grad():
        out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": model.io.input_table()}
        if model.io.head is not None:
            out["lm_head.weight"] = model.io.head.weight
        out["model.norm.weight"] = model.backbone.norm.weight
        for i, block in enumerate(model.backbone.blocks):
            p = f"model.layers.{i}."
            q, k, v = block.attn.qkv.weight.split(D, dim=0)
            out[p + "self_attn.q_proj.weight"] = _permute_heads(q, H)
            out[p + "self_attn.k_proj.weight"] = _permute_heads(k, H)
            out[p + "self_attn.v_proj.weight"] = v
            out[p + "self_attn.o_proj.weight"] = block.attn.proj.weight
            out[p + "input_layernorm.weight"] = block.attn_norm.weight
            out[p + "post_attention_layernorm.weight"] = block.ffn_norm.weight
            out[p + "mlp.gate_proj.weight"] = block.ffn.gate.weight
            out[p + "mlp.up_proj.weight"] = block.ffn.up.weight
            out[p + "mlp.down_proj.weight"] = block.ffn.down.weight
        return {k: t.detach().float().contiguous().clone() for k, t in out.items()}


def llama_config_kwargs(cfg: ModelConfig, vocab: VocabSpec, dtype: str) -> dict[str, Any]:
    """Keyword arguments of `transformers.LlamaConfig` describing `cfg` exactly."""
    check_dtype(dtype)
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ffn_hidden,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.variant == "tied",
        "bos_token_id": vocab.eot_id,
        "eos_token_id": vocab.eot_id,
        "pad_token_id": None,
        "initializer_range": cfg.init_std,
        "torch_dtype": dtype,
    }


def to_llama(model: LanguageModel, vocab: VocabSpec, dtype: str = "float32") -> Any:
    """A `transformers.LlamaForCausalLM` (eval mode, `dtype`) computing what `model` computes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch_dtype = check_dtype(dtype)
    config = LlamaConfig(**llama_config_kwargs(model.cfg, vocab, dtype))
    hf = LlamaForCausalLM(config).to(torch_dtype)
    state = llama_state_dict(model)
    if config.tie_word_embeddings:  # one shared parameter: load it under both names
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    hf.load_state_dict({k: v.to(torch_dtype) for k, v in state.items()}, strict=True)
    return hf.eval().requires_grad_(False)
