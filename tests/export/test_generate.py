"""`leviathan generate`: greedy decoding equal to transformers' own `generate` on the exported
cell, sampling distributed as softmax(logits / T) (a chi-square test by scipy), the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import special, stats
from transformers import AutoModelForCausalLM

from leviathan.eval.checkpoint import open_checkpoint
from leviathan.eval.generate import Sampling, generate, next_token
from leviathan.export.write import export_run
from leviathan.vocab import get_vocab

PROMPT = [464, 2068, 318, 257]  # four gpt2 ids


def test_greedy_equals_transformers_generate_on_the_export(micro_run: Path, tmp_path: Path) -> None:
    export_run(micro_run, tmp_path / "hf")
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    eot = get_vocab("gpt2").eot_id
    _, model = open_checkpoint(micro_run, device="cpu")
    ours = generate(model, PROMPT, Sampling(max_new_tokens=24, stop_id=eot))
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([PROMPT]), do_sample=False, max_new_tokens=24, eos_token_id=eot
        )
    theirs = out[0, len(PROMPT) :].tolist()
    assert len(ours) > 1
    assert ours == theirs


def test_sampling_draws_from_the_tempered_softmax_among_the_top_k() -> None:
    logits = torch.tensor([2.0, 1.5, 0.3, -1.0, 3.0, -4.0, 0.9])
    sampling = Sampling(temperature=0.7, top_k=4)
    gen = torch.Generator().manual_seed(0)
    draws = np.array([next_token(logits, sampling, gen) for _ in range(6000)])
    top = np.argsort(-logits.numpy())[:4]
    expected = special.softmax(logits.numpy()[top].astype(np.float64) / 0.7)
    observed = np.array([(draws == i).sum() for i in top])
    assert observed.sum() == len(draws)  # nothing outside the top 4
    assert stats.chisquare(observed, expected * len(draws)).pvalue > 1e-3


def test_temperature_zero_is_the_argmax() -> None:
    logits = torch.tensor([0.1, 5.0, 4.9, -2.0])
    assert next_token(logits, Sampling()) == 1


def test_a_seed_gives_the_same_sample(micro_run: Path) -> None:
    _, model = open_checkpoint(micro_run, device="cpu")
    sampling = Sampling(max_new_tokens=8, temperature=1.0, seed=3)
    assert generate(model, PROMPT, sampling) == generate(model, PROMPT, sampling)


def test_a_window_beyond_the_context_slides(micro_run: Path) -> None:
    _, model = open_checkpoint(micro_run, device="cpu")
    long_prompt = PROMPT * 20  # 80 tokens: more than the micro context of 64
    new = generate(model, long_prompt, Sampling(max_new_tokens=3))
    assert len(new) == 3


@pytest.mark.parametrize(
    ("field", "value"), [("max_new_tokens", 0), ("temperature", -1.0), ("top_k", 0)]
)
def test_bad_sampling_values_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        Sampling(**{field: value}).check()


def test_cli_prints_one_json_line_per_sample(micro_run: Path, tokenizer_of) -> None:  # type: ignore[no-untyped-def]
    args = ["generate", str(micro_run), "--prompt", "The code is a", "--max-new-tokens", "5"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leviathan.cli",
            *args,
            "--samples",
            "2",
            "--temperature",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    records = [json.loads(line) for line in out]
    assert [r["seed"] for r in records] == [0, 1]
    assert records[0]["prompt_ids"] == tokenizer_of("gpt2").encode("The code is a")
    assert all(1 <= len(r["ids"]) <= 5 for r in records)


def test_more_new_tokens_than_the_context_are_refused_in_one_line(micro_run: Path) -> None:
    """10^8 new tokens would run for days without a word: refused before the first."""
    _, model = open_checkpoint(micro_run, device="cpu")
    args = ["generate", str(micro_run), "--prompt", "The code is a"]
    done = subprocess.run(
        [sys.executable, "-m", "leviathan.cli", *args, "--max-new-tokens", "100000000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "leviathan generate: error: max_new_tokens=100000000: more than the model's context of "
        f"{model.max_seq_len} tokens (beyond it a sample no longer sees its prompt); ask for at "
        f"most {model.max_seq_len}\n"
    )
    new = generate(model, PROMPT, Sampling(max_new_tokens=model.max_seq_len))
    assert len(new) <= model.max_seq_len  # the context itself is allowed
