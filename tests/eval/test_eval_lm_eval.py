"""lm-evaluation-harness: the `leviathan` model and the official tasks on local files."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from leviathan.eval.checkpoint import load_model
from leviathan.eval.config import PAPER_TASKS, LmEvalConfig
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.lm_eval_adapter import LeviathanLM
from leviathan.eval.lm_eval_tasks import build_tasks, run_lm_eval
from leviathan.eval.results import write_result


def data_cfg(task_files: dict[str, dict[str, str]], tasks=PAPER_TASKS, **kw) -> LmEvalConfig:
    return LmEvalConfig(
        tasks=tuple(tasks),
        data={t: {"data_files": task_files[t]} for t in tasks},
        bootstrap_iters=10,
        **kw,
    )


def direct_loglikelihood(model, tok, context: str, continuation: str) -> float:
    """log p(continuation | context) with the LanguageModel's full logits (lm-eval's split)."""
    ctx = tok.encode(context) if context else [tok.spec.eot_id]
    whole = tok.encode(context + continuation) if context else ctx + tok.encode(continuation)
    cont = whole[len(ctx) :]
    ids = torch.as_tensor(whole, dtype=torch.int64)[None]
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[:, :-1]).double(), -1)[0]
    return float(sum(logp[len(ctx) - 1 + i, t] for i, t in enumerate(cont)))


@pytest.fixture(scope="module")
def paper_run(loaded, task_files, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    ckpt, em = loaded
    samples = tmp_path_factory.mktemp("lm_eval") / "samples.jsonl"
    return run_lm_eval(ckpt, em, data_cfg(task_files), samples_out=samples), samples


def test_paper_tasks_on_local_files_are_scored_by_lm_eval(
    paper_run, task_files, tmp_path: Path
) -> None:
    out, samples_path = paper_run
    r = out["results"]
    assert r["lm_eval_version"] == lm_eval.__version__
    n_docs = {t: sum(1 for _ in open(f)) for t, files in task_files.items() for f in files.values()}
    for task in PAPER_TASKS:
        t = r["tasks"][task]
        assert 0.0 <= t["metrics"]["acc,none"] <= 1.0
        assert t["n_samples"]["effective"] == n_docs[task]
        assert t["version"] is not None
        assert t["n_shot"] == 0
        assert len(t["task_hash"]) == 64
        assert t["data"]["kind"] == "local"
        assert t["config"]["dataset_path"] == "json"
        assert t["config"]["metadata"]["official_config"].endswith(".yaml")
    assert "acc_norm,none" in r["tasks"]["hellaswag"]["metrics"]
    assert "perplexity,none" in r["tasks"]["lambada_openai"]["metrics"]
    accs = [r["tasks"][t]["metrics"]["acc,none"] for t in PAPER_TASKS]
    assert r["mean_acc"] == pytest.approx(sum(accs) / len(accs))
    rows = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert len(rows) == sum(n_docs.values()) == r["samples"]["count"]
    assert {i["role"] for i in out["inputs"]} == {f"lm_eval:{t}" for t in PAPER_TASKS}
    write_result(tmp_path / "lm_eval.json", out)  # strict JSON


def test_lm_eval_scores_are_our_model_s_loglikelihoods(paper_run, loaded) -> None:
    out, samples_path = paper_run
    ckpt, _ = loaded
    model = load_model(ckpt)
    from leviathan.data.tokenizers import load_tokenizer

    tok = load_tokenizer("gpt2")
    rows = [json.loads(line) for line in samples_path.read_text().splitlines()]
    for row in [r for r in rows if r["task"] in ("piqa", "winogrande")]:
        logliks = [resp[0][0] for resp in row["resps"]]
        for (context, continuation), got in zip(row["arguments"], logliks, strict=True):
            (ctx, cont) = (context, continuation) if isinstance(context, str) else context
            assert got == pytest.approx(direct_loglikelihood(model, tok, ctx, cont), abs=2e-3)
        # lm-eval's accuracy of this sample is the argmax of those log-likelihoods
        doc = row["doc"]
        gold = doc["label"] if row["task"] == "piqa" else int(doc["answer"]) - 1
        assert row["acc"] == float(int(np.argmax(logliks)) == gold)


def test_whitespace_only_context_is_scored_after_the_prefix_token(loaded) -> None:
    """lm-eval moves a context's trailing spaces into the continuation, so "   " leaves no context
    token: the continuation must be scored after EOT (HFLM's prefix token), from full logits."""
    from leviathan.data.tokenizers import load_tokenizer

    ckpt, _ = loaded
    model, tok = load_model(ckpt), load_tokenizer("gpt2")
    lm = LeviathanLM(loaded=loaded, batch_size=2)
    reqs = [
        Instance("loglikelihood", {}, (ctx, " hello world"), i)
        for i, ctx in enumerate(["   ", "\n", ""])
    ]
    got = lm.loglikelihood(reqs, disable_tqdm=True)
    for (ctx, cont), (logp, _) in zip([r.args for r in reqs], got, strict=True):
        ids = [tok.spec.eot_id, *tok.encode(ctx + cont)]  # EOT, then everything lm-eval scores
        x = torch.as_tensor(ids, dtype=torch.int64)[None]
        with torch.no_grad():
            full = torch.log_softmax(model(x[:, :-1]).double(), -1)[0]
        expected = float(sum(full[i, t] for i, t in enumerate(ids[1:])))
        assert logp == pytest.approx(expected, abs=2e-4), repr(ctx)


def test_pretrained_is_the_checkpoint_argument_and_auto_is_refused(runs, loaded) -> None:
    lm = LeviathanLM.create_from_arg_string(
        f"pretrained={runs['leviathan']},batch_size=4,device=cpu"
    )
    assert lm.ckpt.sha256 == loaded[0].sha256
    assert lm.batch_size == 4
    with pytest.raises(EvalInputError, match="`auto` is not supported.*batch_size=32"):
        LeviathanLM.create_from_arg_string(
            f"pretrained={runs['leviathan']},batch_size=auto,device=cpu"
        )
    with pytest.raises(EvalInputError, match="disagree"):
        LeviathanLM(pretrained=runs["leviathan"], checkpoint=runs["tied"], device="cpu")


def test_acc_and_acc_norm_are_both_recorded(paper_run) -> None:
    r = paper_run[0]["results"]
    both = [t for t, v in r["tasks"].items() if "acc_norm,none" in v["metrics"]]
    assert set(both) == {"hellaswag", "arc_easy", "arc_challenge", "piqa"}
    expected = [
        r["tasks"][t]["metrics"]["acc_norm,none" if t in both else "acc,none"] for t in PAPER_TASKS
    ]
    assert r["mean_acc_norm"] == pytest.approx(sum(expected) / len(expected))


@pytest.mark.slow
def test_lm_eval_s_own_cli_runs_our_checkpoint(runs, loaded, task_files, tmp_path: Path) -> None:
    """`leviathan-lm-eval` is lm-eval's CLI with our model registered; lm-eval's own task YAMLs
    on local files (written for --include_path), its own output layout; same numbers as ours."""
    import subprocess
    import sys

    from leviathan.eval.lm_eval_tasks import write_local_tasks

    cfg = data_cfg(task_files, ["piqa", "arc_easy"])
    write_local_tasks(cfg, tmp_path / "tasks")
    exe = Path(sys.executable).with_name("leviathan-lm-eval")
    args = [
        str(exe),
        "--model",
        "leviathan",
        "--model_args",
        f"pretrained={runs['leviathan']}",
        "--device",
        "cpu",
        "--tasks",
        "piqa,arc_easy",
        "--include_path",
        str(tmp_path / "tasks"),
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
    ]
    out = subprocess.run([*args, "--batch_size", "4"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = list((tmp_path / "out").rglob("results_*.json"))
    assert len(results) == 1
    assert len(list((tmp_path / "out").rglob("samples_piqa_*.jsonl"))) == 1
    theirs = json.loads(results[0].read_text())["results"]
    ours = run_lm_eval(*loaded, cfg, harness_dir=tmp_path / "harness")["results"]
    for task in ("piqa", "arc_easy"):
        for metric in ("acc,none", "acc_norm,none"):
            assert theirs[task][metric] == ours["tasks"][task]["metrics"][metric]
    assert [Path(f["path"]).name.split("_")[0] for f in ours["harness_output"]["files"]].count(
        "samples"
    ) == 2
    bad = subprocess.run(
        [*args, "--batch_size", "auto"], capture_output=True, text=True, timeout=600
    )
    assert bad.returncode != 0
    assert "`auto` is not supported" in bad.stderr


def test_batching_does_not_change_scores(loaded) -> None:
    lm1 = LeviathanLM(loaded=loaded, batch_size=1)
    lm7 = LeviathanLM(loaded=loaded, batch_size=7)
    reqs = [
        Instance("loglikelihood", {}, (c, x), i)
        for i, (c, x) in enumerate(
            [
                ("Question: what is a list?\nAnswer:", " a sequence"),
                ("", "Hello world"),
                ("The", " end of the line here"),
                ("a " * 100, " long context truncated"),
                ("x", " y"),
            ]
        )
    ]
    a, b = lm1.loglikelihood(reqs, disable_tqdm=True), lm7.loglikelihood(reqs, disable_tqdm=True)
    for (la, ga), (lb, gb) in zip(a, b, strict=True):
        assert la == pytest.approx(lb, abs=1e-4)
        assert ga == gb


def test_loglikelihood_rolling_follows_lm_eval_windows(loaded) -> None:
    ckpt, _ = loaded
    model = load_model(ckpt)
    lm = LeviathanLM(loaded=loaded, batch_size=3, max_length=16)
    text = "Return a new list containing all items from the iterable in ascending order, " * 3
    (got,) = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True
    )
    tokens = lm.tok_encode(text)
    assert len(tokens) > 40  # several windows
    expected = 0.0
    for ctx, cont in map(
        make_disjoint_window, get_rolling_token_windows(tokens, lm.eot_token_id, 16, 1)
    ):
        ids = torch.as_tensor((ctx + cont)[-17:], dtype=torch.int64)[None]
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[:, :-1]).double(), -1)[0]
        n = len(cont)
        expected += float(sum(logp[ids.shape[1] - 1 - n + i, t] for i, t in enumerate(cont)))
    assert got == pytest.approx(expected, abs=1e-3)


def test_generate_until_is_greedy_and_stops(loaded) -> None:
    ckpt, _ = loaded
    model = load_model(ckpt)
    lm = LeviathanLM(loaded=loaded, batch_size=2)
    prompt = "The quick brown fox"
    ids = lm.tok_encode(prompt)
    greedy = []
    with torch.no_grad():
        for _ in range(6):
            nxt = int(model(torch.as_tensor([ids + greedy]))[0, -1].argmax())
            if nxt == lm.eot_token_id:
                break
            greedy.append(nxt)
    full = lm.tok_decode(greedy)
    reqs = [
        Instance("generate_until", {}, (prompt, {"until": [], "max_gen_toks": 6}), 0),
        Instance(
            "generate_until", {}, ("Another prompt", {"until": ["\n\n"], "max_gen_toks": 3}), 1
        ),
    ]
    out = lm.generate_until(reqs, disable_tqdm=True)
    assert out[0] == full
    if len(full) > 2:  # a stop string cuts the generation before it
        stop = full[len(full) // 2 :]
        cut = lm.generate_until(
            [Instance("generate_until", {}, (prompt, {"until": [stop], "max_gen_toks": 6}), 0)],
            disable_tqdm=True,
        )
        assert cut[0] == full.split(stop)[0]
    with pytest.raises(EvalInputError, match="greedily"):
        lm.generate_until(
            [Instance("generate_until", {}, ("x", {"do_sample": True}), 0)], disable_tqdm=True
        )


def test_registered_as_leviathan_and_built_from_model_args(runs, task_files, loaded) -> None:
    assert get_model("leviathan") is LeviathanLM
    lm = LeviathanLM.create_from_arg_string(
        f"checkpoint={runs['leviathan']},batch_size=4,device=cpu"
    )
    assert lm.ckpt.sha256 == loaded[0].sha256
    assert lm.batch_size == 4
    assert lm.max_length == 64
    tasks, _, tm = build_tasks(data_cfg(task_files, ["piqa"]))
    by_name = lm_eval.simple_evaluate(
        model="leviathan",
        model_args=f"checkpoint={runs['leviathan']},device=cpu",
        tasks=list(tasks.values()),
        bootstrap_iters=0,
        task_manager=tm,
    )
    by_object = run_lm_eval(*loaded, data_cfg(task_files, ["piqa"]))
    assert (
        by_name["results"]["piqa"]["acc,none"]
        == by_object["results"]["tasks"]["piqa"]["metrics"]["acc,none"]
    )


def test_task_errors(task_files, unreachable_hub) -> None:
    with pytest.raises(
        HubUnreachable, match=r"piqa \(baber/piqa\).*unreachable.*lm_eval.data.<task>.data_files"
    ):
        build_tasks(LmEvalConfig(tasks=("piqa",)))
    with pytest.raises(EvalInputError, match="scores arc_easy on its 'test' split"):
        build_tasks(
            LmEvalConfig(
                tasks=("arc_easy",),
                data={"arc_easy": {"data_files": {"validation": task_files["arc_easy"]["test"]}}},
            )
        )
    with pytest.raises(EvalInputError, match="not in lm_eval.tasks"):
        build_tasks(
            LmEvalConfig(
                tasks=("piqa",), data={"hellaswag": {"data_files": task_files["hellaswag"]}}
            )
        )
    with pytest.raises(EvalInputError, match="unknown lm-eval task 'hellaswagg'"):
        build_tasks(LmEvalConfig(tasks=("hellaswagg",)))
