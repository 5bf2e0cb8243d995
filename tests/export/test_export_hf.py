"""The exported model in transformers' own LlamaForCausalLM computes our model's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from leviathan.export import hf
from leviathan.model import build_model, model_config
from leviathan.model.transformer import apply_rope, rope_tables
from leviathan.model.variants import VARIANTS
from leviathan.vocab import get_vocab

VOCABS = ("gpt2", "cl100k_base", "o200k_base")


def rel_diff(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.double() - theirs.double()).abs().max() / ours.double().abs().max())


def sharpened(scale: str, vocab: str, variant: str, seed: int = 0) -> torch.nn.Module:
    """A model with weights far from init: RoPE, norms and every input path matter."""
    torch.manual_seed(seed)
    model = build_model(model_config(scale, vocab, variant)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)  # a norm gain of 1 would hide a missing or swapped norm
            elif "qkv" in name:
                p.mul_(4.0)  # sharp attention: the position of every key matters
    return model


def roundtrip(
    model: torch.nn.Module, vocab: str, tmp_path: Path, dtype: str = "float32"
) -> torch.nn.Module:
    """Export `model`, save it as transformers does, load it back with AutoModelForCausalLM."""
    hf.to_llama(model, get_vocab(vocab), dtype).save_pretrained(tmp_path)
    return AutoModelForCausalLM.from_pretrained(tmp_path).eval()


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_parity(variant: str, vocab: str, tmp_path: Path) -> None:
    model = sharpened("micro", vocab, variant)
    loaded = roundtrip(model, vocab, tmp_path)
    assert type(loaded).__name__ == "LlamaForCausalLM"
    ids = torch.randint(0, model.cfg.vocab_size, (2, model.cfg.max_seq_len))  # full context
    with torch.no_grad():
        ours, theirs = model(ids), loaded(input_ids=ids).logits
    assert theirs.dtype == torch.float32
    assert rel_diff(ours, theirs) <= 1e-5
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert ("lm_head.weight" in keys) == (variant != "tied")
    assert loaded.config.tie_word_embeddings == (variant == "tied")
    if variant == "tied":
        assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()


@pytest.mark.slow
def test_logits_parity_tiny(tmp_path: Path) -> None:
    """The tiny preset: 4 layers, context 256, a wider LEV."""
    model = sharpened("tiny", "gpt2", "leviathan")
    loaded = roundtrip(model, "gpt2", tmp_path)
    ids = torch.randint(0, model.cfg.vocab_size, (1, model.cfg.max_seq_len))
    with torch.no_grad():
        assert rel_diff(model(ids), loaded(input_ids=ids).logits) <= 1e-5


def test_without_the_qk_permutation_logits_differ(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The q/k row permutation is what makes parity hold (interleaved vs half rotation)."""
    model = sharpened("micro", "gpt2", "untied")
    ids = torch.randint(0, model.cfg.vocab_size, (2, model.cfg.max_seq_len))
    monkeypatch.setattr(hf, "rope_row_permutation", lambda hd: torch.arange(hd))
    unpermuted = hf.to_llama(model, get_vocab("gpt2"))
    with torch.no_grad():
        assert rel_diff(model(ids), unpermuted(input_ids=ids).logits) > 1e-2


def test_rope_permutation_against_transformers_rotation() -> None:
    """Our interleaved rotation, rows permuted, is transformers' own apply_rotary_pos_emb."""
    H, T, hd = 2, 16, 8
    q, k = torch.randn(2, 1, H, T, hd).unbind(0)
    cos, sin = rope_tables(hd, T, 10000.0)
    perm = hf.rope_row_permutation(hd)
    hf_cos, hf_sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    hq, hk = apply_rotary_pos_emb(q[..., perm], k[..., perm], hf_cos, hf_sin)
    torch.testing.assert_close(apply_rope(q, cos, sin)[..., perm], hq)
    torch.testing.assert_close(apply_rope(k, cos, sin)[..., perm], hk)


def test_bfloat16_export(tmp_path: Path) -> None:
    model = sharpened("micro", "gpt2", "leviathan")
    loaded = roundtrip(model, "gpt2", tmp_path, "bfloat16")
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
    ids = torch.randint(0, model.cfg.vocab_size, (1, model.cfg.max_seq_len))
    with torch.no_grad():
        assert (
            rel_diff(model(ids), loaded(input_ids=ids).logits.float()) < 0.1
        )  # bf16 rounding only


def test_unknown_dtype_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown dtype 'float16': use one of float32, bfloat16"):
        hf.check_dtype("float16")


def test_workflow_schema_offers_exactly_the_export_dtypes() -> None:
    import yaml

    from leviathan.layout import repo_root

    schema = yaml.safe_load(
        (repo_root() / "workflow" / "schemas" / "config.schema.yaml").read_text()
    )
    assert schema["properties"]["export"]["properties"]["dtype"]["enum"] == list(hf.DTYPES)
