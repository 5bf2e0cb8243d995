import math

import pytest
import torch

from leviathan.model import VARIANTS, build_model, model_config
from leviathan.model.accounting import account_model
from leviathan.model.variants import (
    BinaryCodeMLP,
    CodebookMLP,
    FactorizedTableInput,
    lev_parameter_count,
    n_bits,
)

ALL = list(VARIANTS)


def micro(variant: str, **overrides):
    return model_config("micro", "gpt2", variant, vocab_size=500, overrides=overrides or None)


@pytest.mark.parametrize("variant", ALL)
def test_shapes_and_one_step_lowers_loss(variant: str) -> None:
    torch.manual_seed(0)
    cfg = micro(variant)
    model = build_model(cfg)
    ids = torch.randint(0, cfg.vocab_size, (4, 33))
    x, y = ids[:, :-1], ids[:, 1:]
    assert model.io.embed(x).shape == (4, 32, cfg.d_model)
    assert model(x).shape == (4, 32, cfg.vocab_size)
    assert model.io.input_table().shape == (cfg.vocab_size, cfg.d_model)
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
    )
    before = model.loss(x, y)
    before.backward()
    opt.step()
    with torch.no_grad():
        after = model.loss(x, y)
    assert math.isfinite(before.item())
    assert after.item() < before.item()


@pytest.mark.parametrize("variant", ALL)
def test_input_table_equals_embedding_of_every_id(variant: str) -> None:
    model = build_model(micro(variant))
    ids = torch.tensor([[0, 499, 17, 17]])
    with torch.no_grad():
        torch.testing.assert_close(
            model.io.input_table()[ids], model.io.embed(ids), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("variant", ALL)
def test_parameter_counts_equal_the_counter_and_closed_forms(variant: str) -> None:
    cfg = micro(variant)
    model = build_model(cfg)
    acc = account_model(model)
    V, D = cfg.vocab_size, cfg.d_model
    assert acc.total_params == sum(p.numel() for p in model.parameters())
    assert acc.total_params == acc.input_params + acc.backbone_params + acc.head_params
    assert acc.head_params == (0 if variant == "tied" else V * D)
    lev = cfg.lev
    expected_input = {
        "tied": V * D,
        "untied": V * D,
        "albert": V * FactorizedTableInput.width(cfg) + FactorizedTableInput.width(cfg) * D,
        "flat_mlp": (n_bits(V) + 1) * (h := BinaryCodeMLP.width(cfg)) + (h + 1) * D,
        "factored_mlp": lev.n_digits * cfg.lev_base * lev.d_seed
        + (lev.d_seed + 1) * (g := CodebookMLP.width(cfg))
        + (g + 1) * D,
        "leviathan": lev.n_digits * cfg.lev_base * lev.d_seed
        + lev.n_heads * (lev.d_seed**2 + lev.d_seed)
        + 2 * lev.n_heads * lev.d_seed
        + lev.n_heads * lev.d_seed * lev.n_knots * lev.rank
        + lev.n_heads * lev.rank * D,
    }[variant]
    assert acc.input_params == expected_input


@pytest.mark.parametrize("variant", ["albert", "flat_mlp", "factored_mlp"])
def test_ablations_are_parameter_matched_to_lev(variant: str) -> None:
    for scale, vocab in [("400m", "o200k_base"), ("tiny", "gpt2")]:
        cfg = model_config(scale, vocab, variant)
        acc = account_model(build_model(cfg, "meta"))
        target = lev_parameter_count(cfg)
        # the width is an integer: the match is within one unit of width
        unit = {"albert": cfg.vocab_size + cfg.d_model}.get(variant, cfg.d_model + 300)
        assert abs(acc.input_params - target) <= unit


def test_mlp_hidden_overrides_the_matched_width() -> None:
    model = build_model(micro("albert", mlp_hidden=7))
    assert model.io.input.table.shape == (500, 7)


def test_tied_head_is_the_input_table() -> None:
    model = build_model(micro("tied"))
    assert model.io.output_weight is model.io.input.weight
    assert (
        build_model(micro("untied")).io.output_weight
        is not build_model(micro("untied")).io.input.weight
    )


@pytest.mark.parametrize("variant", ALL)
def test_out_of_range_ids_raise(variant: str) -> None:
    model = build_model(micro(variant))
    with pytest.raises(ValueError, match=r"token id 500 is outside \[0, 500\).*retokenize"):
        model(torch.tensor([[1, 500]]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n_heads": 3}, r"d_model=64 is not divisible by n_heads=3"),
        (
            {"lev": {"base": 7}},
            r"lev.base=7 with lev.n_digits=3 covers only 343 ids < vocab_size=500.*at least 8",
        ),
        ({"variant": "nope"}, r"variant='nope' is unknown: use one of tied, untied"),
        ({"d_model": 0}, r"d_model=0 must be a positive integer"),
        ({"lev": {"n_knots": 2}}, r"lev.n_knots=2 must be >= 3"),
        ({"bogus": 1}, r"unknown model config key\(s\) \['bogus'\]"),
    ],
)
def test_bad_configs_name_the_value_and_fix(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_config("micro", "gpt2", "leviathan", vocab_size=500, overrides=overrides)


def test_unknown_scale_and_vocab() -> None:
    with pytest.raises(ValueError, match="unknown scale 'huge'"):
        model_config("huge", "gpt2", "tied")
    with pytest.raises(ValueError, match="unknown vocabulary 'bert'.*o200k_base"):
        model_config("micro", "bert", "tied")


def test_sequence_longer_than_context_raises() -> None:
    model = build_model(micro("tied"))
    with pytest.raises(ValueError, match="exceeds max_seq_len=64"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_backbone_is_causal() -> None:
    torch.manual_seed(0)
    model = build_model(micro("leviathan"))
    a = torch.randint(0, 500, (1, 20))
    b = a.clone()
    b[0, 12:] = torch.randint(0, 500, (8,))
    with torch.no_grad():
        torch.testing.assert_close(model(a)[0, :12], model(b)[0, :12])
