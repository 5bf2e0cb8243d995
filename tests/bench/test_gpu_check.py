"""bench/gpu_check.py: its own code at micro shapes on CPU (--smoke, so it cannot rot), the
guards that keep a scarce GPU run from being wasted (a stock GPU environment imports it, it
refuses to run without CUDA, a failed or timed-out measurement leaves the others on disk),
and what makes it its own verdict: every figure beside its prediction at the shapes measured,
a failed prediction never costing its measurement, and the closing summary."""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from leviathan.model import VARIANTS, model_config

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
ORDER = [
    "step_ratio",
    "materialize_ms",
    "lev_kernels_ms",
    "eval_tokens_s",
    "eval_tokens_s_1.2b",
    "bf16_vs_fp32",
    "deterministic_overhead",
    "deterministic_repeat",
    "step_ratio_compiled",
    "throughput_1.2b",
]
SHAPES = {"micro_batch", "distinct_ids", "ids", "d_model", "vocab_size"}


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec
    assert spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sibling(name: str) -> ModuleType:
    """A module beside the script (on sys.path once the script is loaded)."""
    _script()
    return importlib.import_module(name)


def _unpredicted(figure: dict[str, Any], prediction: dict[str, Any], path: str = "") -> list[str]:
    """Measured values (numbers, verdicts, a memory not measured here) with neither a predicted
    value nor a stated reason in `prediction` at the same place."""
    gaps = []
    for key, value in figure.items():
        if key in ("predicted", "error") or key in SHAPES:
            continue
        if isinstance(value, dict):
            gaps += _unpredicted(value, prediction.get(key) or {}, f"{path}{key}.")
        elif isinstance(value, int | float) or key == "peak_allocated_gb":
            reason = (prediction.get("none") or {}).get(key)
            if prediction.get(key) is None and not reason:
                gaps.append(path + key)
    return gaps


def _figure_of(label: str) -> str:
    """The figure a summary row belongs to (figure names hold dots: `throughput_1.2b`)."""
    return max((n for n in ORDER if label == n or label.startswith(n + ".")), key=len)


def _rows(result: dict[str, Any], figure: str) -> dict[str, dict[str, Any]]:
    return {r["figure"]: r for r in result["summary"] if _figure_of(r["figure"]) == figure}


@pytest.mark.slow
def test_gpu_check_smoke_runs_and_writes_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _script().main(["--smoke", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["smoke"]
    assert r["device"] == "cpu"
    assert r["predicted_gpu"] == "H200"  # no rates for a CPU: the fallback
    assert list(r["seconds"]) == ORDER  # eager first, compiled last
    assert not [k for k in ORDER if "error" in r[k] or "error" in r[k]["predicted"]]
    # every measured value has its prediction, or the reason it has none
    assert {k: _unpredicted(r[k], r[k]["predicted"]) for k in ORDER} == {k: [] for k in ORDER}
    for key in ("step_ratio", "step_ratio_compiled"):
        _check_ratio(r[key], compiled=key.endswith("compiled"))
    assert r["throughput_1.2b"]["tokens_s"] > 0
    assert r["materialize_ms"]["ms"] > 0
    assert r["materialize_ms"]["predicted"]["ms"] > 0
    assert r["lev_kernels_ms"]["plain_forward_backward_ms"] > 0
    assert r["lev_kernels_ms"]["predicted"]["forward_ms"] > 0
    for key in ("eval_tokens_s", "eval_tokens_s_1.2b"):
        assert r[key]["tokens_s"] > 0
        assert r[key]["predicted"]["tokens_s"] > 0
    assert r["deterministic_overhead"]["slowdown"] > 0
    # --smoke runs the bf16 branches under CPU autocast: a real, small difference
    assert 0.0 < r["bf16_vs_fp32"]["nats"] < 0.1
    _check_training_figures(r)
    # every variant reruns and resumes bitwise under deterministic mode (here on CPU; the
    # same check is the CUDA proof when the script runs on a GPU)
    repeat = r["deterministic_repeat"]
    assert {v: repeat[v] for v in VARIANTS} == dict.fromkeys(VARIANTS, True)
    _check_summary(r, capsys.readouterr().out)


def _check_ratio(fig: dict[str, Any], compiled: bool) -> None:
    """The step ratio measured and predicted, the prediction at the micro-batch and the
    distinct ids measured (`lev_predict.step_ratio` asked directly)."""
    lev_predict = _sibling("lev_predict")
    tied, lev, pred = fig["tied"], fig["leviathan"], fig["predicted"]
    assert fig["ratio"] == pytest.approx(lev["step_ms"] / tied["step_ms"])
    assert pred["ratio"] == pytest.approx(pred["leviathan"]["step_ms"] / pred["tied"]["step_ms"])
    ids = statistics.mean(lev["distinct_ids"])
    assert pred["detail"]["distinct_ids"] == ids
    cfg = model_config("micro", "gpt2", "leviathan")
    direct = lev_predict.step_ratio(cfg, lev["micro_batch"], round(ids), "H200", compiled)
    assert pred["ratio"] == pytest.approx(direct["step_ratio"])
    assert pred["ratio"] > 1.0  # LEV's work added to the tied step
    lev_pred = pred["leviathan"]
    assert lev_pred["step_ms"] == pytest.approx(
        lev_pred["detail"]["tied_step_ms"] + lev_pred["detail"]["lev_extra_ms"]
    )
    assert lev_pred["plan_step_ms"] == pytest.approx(
        sum(lev_pred["detail"]["plan_part_ms"].values())
    )


def _check_training_figures(r: dict[str, Any]) -> None:
    steps = _sibling("gpu_check_steps")
    context = model_config("micro", "gpt2", "leviathan").max_seq_len
    ratios = [(k, v) for k in ("step_ratio", "step_ratio_compiled") for v in ("tied", "leviathan")]
    figures = {f"{k}.{v}": (r[k][v], r[k]["predicted"][v]) for k, v in ratios}
    figures["throughput_1.2b"] = (r["throughput_1.2b"], r["throughput_1.2b"]["predicted"])
    for name, (fig, pred) in figures.items():
        assert fig["micro_batch"] == steps.SMOKE_MICRO_BATCH, name
        assert len(set(fig["distinct_ids"])) > 1, name  # the batches' distinct-id counts vary
        assert max(fig["distinct_ids"]) <= steps.SMOKE_MICRO_BATCH * context, name
        assert fig["launches_per_step"] > 0, name  # on CPU: the aten ops of one step
        assert 0 < pred["mfu"] < 1, name
        tokens = fig["micro_batch"] * context
        assert pred["tokens_s"] == pytest.approx(tokens / (pred["step_ms"] / 1e3)), name
        assert pred["peak_allocated_gb"] > 0, name
        assert pred["detail"]["peak_job_gb"] > pred["peak_allocated_gb"], name
        assert fig["peak_allocated_gb"] == "not measured on CPU", name
        assert set(pred["none"]) == {"compile_s", "launches_per_step"}, name
    tied = r["step_ratio"]["predicted"]["tied"]
    assert tied["step_ms"] == pytest.approx(sum(tied["detail"]["part_ms"].values()))
    assert r["step_ratio"]["tied"]["compile_s"] == 0.0  # eager: nothing compiled
    assert r["step_ratio_compiled"]["tied"]["compile_s"] > 0
    assert r["throughput_1.2b"]["compile_s"] > 0
    # compiled, the roofline predicts the fused backbone: a shorter step than eager
    compiled = r["step_ratio_compiled"]["predicted"]["tied"]["step_ms"]
    assert compiled < r["step_ratio"]["predicted"]["tied"]["step_ms"]


def _check_summary(r: dict[str, Any], printed: str) -> None:
    """The last block: every figure with predicted, measured and their ratio, in the JSON and
    printed last."""
    rows = r["summary"]
    figures = [_figure_of(row["figure"]) for row in rows]
    assert figures == sorted(figures, key=ORDER.index)  # in the order measured
    assert set(figures) == set(ORDER)
    for row in rows:
        assert set(row) == {"figure", "predicted", "measured", "ratio"}
        assert row["predicted"] is not None, row  # a value, "none: <why>" or an error
        numbers = all(isinstance(row[k], float | int) for k in ("predicted", "measured"))
        if numbers and not isinstance(row["measured"], bool):
            assert row["ratio"] == pytest.approx(row["measured"] / row["predicted"]), row
    for name in ("step_ratio", "step_ratio_compiled"):
        ratio = _rows(r, name)[f"{name}.ratio"]
        assert (ratio["predicted"], ratio["measured"]) == (
            r[name]["predicted"]["ratio"],
            r[name]["ratio"],
        )
        for variant in ("tied", "leviathan"):
            assert f"{name}.{variant}.step_ms" in _rows(r, name)
            assert f"{name}.{variant}.mfu" in _rows(r, name)
        assert f"{name}.leviathan.step_ms (plan)" in _rows(r, name)
    assert _rows(r, "materialize_ms")["materialize_ms.ms"]["ratio"] > 0
    assert _rows(r, "eval_tokens_s")["eval_tokens_s.tokens_s"]["ratio"] > 0
    reason = _rows(r, "bf16_vs_fp32")["bf16_vs_fp32.nats"]["predicted"]
    assert reason.startswith("none: ")
    tail = printed[printed.rindex("summary (predicted for H200") :]
    assert all(row["figure"] in tail for row in rows)


@pytest.mark.slow
def test_the_predictions_at_the_gpus_shapes_need_no_gpu() -> None:
    """What a GPU run predicts, at its real shapes, computes here: the step ratio at the
    study's 400m micro-batch and the distinct ids its batches hold (not the 8,192 ids of
    micro-batch 16 that `lev_predict`'s default figures assume)."""
    mod, steps, lev_predict = _script(), _sibling("gpu_check_steps"), _sibling("lev_predict")
    setup = steps.Setup(smoke=False, gpu="H200")
    predicted = {k: f.predict() for k, f in mod.measurements(setup).items()}
    assert not [k for k, p in predicted.items() if "error" in p]
    ratio, micro = predicted["step_ratio"], setup.micro_batch["400m"]
    ids = statistics.mean(steps.distinct_ids(setup, "400m"))
    assert ratio["detail"]["distinct_ids"] == ids
    assert ids < micro * 512  # Zipf-distributed ids repeat: fewer distinct ids than tokens
    cfg = model_config("400m", "o200k_base", "leviathan")
    direct = lev_predict.step_ratio(cfg, micro, round(ids), "H200")
    assert ratio["ratio"] == pytest.approx(direct["step_ratio"])
    default = lev_predict.predict("H200")
    assert ratio["ratio"] != pytest.approx(default["step_ratio"])
    assert predicted["materialize_ms"]["ms"] == pytest.approx(default["materialize_ms"])
    assert predicted["step_ratio_compiled"]["ratio"] > 1.0
    assert 0 < predicted["throughput_1.2b"]["mfu"] < 1
    assert predicted["eval_tokens_s_1.2b"]["tokens_s"] < predicted["eval_tokens_s"]["tokens_s"]


def test_the_step_is_the_trainers() -> None:
    """The check steps as the trainer does: bf16 autocast, the gradients clipped to the
    recipe's grad_clip, AdamW with the recipe's hyperparameters (written out here)."""
    steps = _sibling("gpu_check_steps")
    setup = steps.Setup(smoke=True)
    recipe = setup.recipe("micro", "leviathan")
    ids = steps.device_batches(setup, setup.cfg("micro"), steps.SMOKE_MICRO_BATCH)[0]
    stepped = steps.new_model(setup, "micro", "leviathan")
    steps.step_fn(setup, stepped, [ids], recipe)()
    ref = steps.new_model(setup, "micro", "leviathan")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ref(ids[:, :-1], ids[:, 1:])
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), recipe.grad_clip)
    assert norm > recipe.grad_clip  # the clipping acts on this step
    hyper = {k: getattr(recipe, k) for k in ("lr", "betas", "eps", "weight_decay")}
    torch.optim.AdamW(ref.parameters(), **hyper, foreach=True).step()
    mine, theirs = stepped.state_dict(), ref.state_dict()
    assert [k for k in mine if not torch.equal(mine[k], theirs[k])] == []


def test_the_micro_batches_are_the_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the check reads from config/paper.yaml with PyYAML is each cell's micro-batch as
    the plan resolves it (Snakemake's config loading and the training config)."""
    from leviathan.cells import config_cells
    from leviathan.study.config import resolve
    from leviathan.study.resolve import cell_train_config

    steps = _sibling("gpu_check_steps")
    root = SCRIPT.parents[1]
    monkeypatch.chdir(root)
    config = resolve([steps.STUDY], root=root)
    micro = steps.study_micro_batches()
    cells = config_cells(config)
    assert {c.scale for c in cells} == set(micro)
    for cell in cells:
        assert cell_train_config(config, cell).micro_batch == micro[cell.scale], cell


def test_imports_without_the_data_layer_dependencies() -> None:
    """A stock GPU PyTorch environment has no zstandard: the script must import without it
    (and without the data layer that needs it)."""
    code = (
        "import sys, importlib.util\n"
        "sys.modules['zstandard'] = None\n"  # `import zstandard` now raises ImportError
        f"spec = importlib.util.spec_from_file_location('gpu_check', {str(SCRIPT)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "assert 'leviathan.data' not in sys.modules, sorted(sys.modules)\n"
        "assert callable(mod.main)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_limits_fit_the_budget() -> None:
    """The check's limits add up to no more than its budget (<= 5 min with start-up)."""
    mod = _script()
    assert list(mod.LIMITS_S) == ORDER
    assert sum(mod.LIMITS_S.values()) <= mod.BUDGET_S


def test_refuses_to_run_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script()
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device.*--smoke"):
        mod.main(["--out", str(tmp_path)])
    assert not (tmp_path / "gpu_check.json").exists()


def _fake(mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every measurement and prediction replaced by a cheap one that records its call (the
    check's own loop, limits, JSON and summary are what runs)."""
    calls: list[str] = []

    def fake(name: str, value: dict[str, Any]) -> Any:
        def run(*args: object, **kwargs: object) -> dict[str, Any]:
            calls.append(name)
            return value

        return run

    step = {"tied": {"step_ms": 1.0}, "leviathan": {"step_ms": 1.0}}
    monkeypatch.setattr(mod, "step_ratio", fake("step_ratio", {"ratio": 1.0, **step}))
    monkeypatch.setattr(mod, "_throughput", fake("training", {"tokens_s": 1.0}))
    monkeypatch.setattr(mod, "materialize_ms", fake("materialize_ms", {"ms": 1.0}))
    monkeypatch.setattr(mod, "lev_kernels_ms", fake("lev_kernels_ms", {"forward_ms": 1.0}))
    monkeypatch.setattr(mod, "eval_tokens_s", fake("eval_tokens_s", {"tokens_s": 1.0}))
    monkeypatch.setattr(mod, "bf16_vs_fp32", fake("bf16_vs_fp32", {"nats": 1.0}))
    monkeypatch.setattr(mod, "deterministic_overhead", fake("overhead", {"slowdown": 1.0}))
    monkeypatch.setattr(mod, "deterministic_repeat", fake("repeat", {"tied": True}))
    monkeypatch.setattr(mod, "_ratio_prediction", fake("predict", {"ratio": 2.0, **step}))
    monkeypatch.setattr(mod, "_throughput_prediction", fake("predict", {"tokens_s": 2.0}))
    for name, key in (("materialize", "ms"), ("lev_kernels", "forward_ms")):
        monkeypatch.setattr(mod.predict, name, fake("predict", {key: 2.0}))
    monkeypatch.setattr(mod.predict, "eval_tokens", fake("predict", {"tokens_s": 2.0}))
    monkeypatch.setattr(mod, "SMOKE_SLACK", 1)  # the limits as on a GPU
    return calls


def test_a_failed_measurement_is_recorded_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPU time is scarce: an OOM in one measurement must not cost the others, nor its own
    prediction."""
    mod = _script()

    def oom(*args: object) -> float:
        raise RuntimeError("CUDA out of memory (simulated)")

    calls = _fake(mod, monkeypatch)
    monkeypatch.setattr(mod, "materialize_ms", oom)
    result = mod.main(["--smoke", "--out", str(tmp_path)])
    assert "bf16_vs_fp32" in calls
    assert "training" in calls
    error = "RuntimeError: CUDA out of memory (simulated)"
    assert result["materialize_ms"] == {"error": error, "predicted": {"ms": 2.0}}
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == result
    row = _rows(result, "materialize_ms")["materialize_ms.ms"]
    assert (row["predicted"], row["measured"], row["ratio"]) == (2.0, f"error: {error}", None)
    printed = capsys.readouterr()
    assert f" s)  error {error}" in printed.out  # the figure's line: name, seconds, error
    assert "eval_tokens_s.tokens_s" in printed.out  # each figure printed as measured
    assert "Traceback" in printed.err
    assert list(result["seconds"]) == ORDER
    # the others, measured, are beside their predictions: measured / predicted
    assert _rows(result, "eval_tokens_s")["eval_tokens_s.tokens_s"]["ratio"] == 0.5


def test_a_failed_prediction_keeps_its_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prediction that raises is recorded as its error; its figure is still measured (here
    for real: materialize() at the micro shape) and summarised."""
    mod = _script()
    measure = mod.materialize_ms
    _fake(mod, monkeypatch)
    monkeypatch.setattr(mod, "materialize_ms", measure)

    def broken(*args: object) -> dict[str, Any]:
        raise ValueError("no model (injected)")

    monkeypatch.setattr(mod.predict, "materialize", broken)
    result = mod.main(["--smoke", "--out", str(tmp_path)])
    fig = result["materialize_ms"]
    assert fig["ms"] > 0
    assert fig["predicted"] == {"error": "ValueError: no model (injected)"}
    row = _rows(result, "materialize_ms")["materialize_ms.ms"]
    assert row["predicted"] == "error: ValueError: no model (injected)"
    assert (row["measured"], row["ratio"]) == (fig["ms"], None)
    assert "ValueError: no model (injected)" in capsys.readouterr().err  # its traceback


def test_a_timed_out_measurement_leaves_the_earlier_figures_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A measurement over its limit is stopped and recorded; what was measured before it is
    on disk already, and the measurements after it still run."""
    mod = _script()
    on_disk: dict[str, Any] = {}

    def hangs(*args: object) -> dict[str, float]:
        time.sleep(30)
        return {"tokens_s": 1.0}

    def after(*args: object) -> dict[str, float]:
        on_disk.update(json.loads((tmp_path / "gpu_check.json").read_text()))
        return {"nats": 2.0}

    _fake(mod, monkeypatch)
    monkeypatch.setattr(mod, "eval_tokens_s", hangs)
    monkeypatch.setattr(mod, "bf16_vs_fp32", after)
    for name in ("eval_tokens_s", "eval_tokens_s_1.2b"):  # one function, two scales: both hang
        monkeypatch.setitem(mod.LIMITS_S, name, 0.2)
    result = mod.main(["--smoke", "--out", str(tmp_path)])
    assert on_disk["step_ratio"]["ratio"] == 1.0
    assert on_disk["materialize_ms"]["ms"] == 1.0
    for name in ("eval_tokens_s", "eval_tokens_s_1.2b"):
        assert "MeasurementTimeout: over its time limit" in on_disk[name]["error"]
        assert on_disk[name]["predicted"] == {"tokens_s": 2.0}  # computed before it hung
    assert result["bf16_vs_fp32"]["nats"] == 2.0
    assert "throughput_1.2b" in result


def test_the_budget_bounds_the_whole_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script()

    def slow(*args: object) -> dict[str, float]:
        time.sleep(30)
        return {"ms": 1.0}

    _fake(mod, monkeypatch)
    monkeypatch.setattr(mod, "materialize_ms", slow)
    result = mod.main(["--smoke", "--out", str(tmp_path), "--budget", "0.5"])
    assert result["step_ratio"]["ratio"] == 1.0
    assert "MeasurementTimeout" in result["materialize_ms"]["error"]
    assert "budget" in result["throughput_1.2b"]["error"]
    row = _rows(result, "throughput_1.2b")["throughput_1.2b"]  # neither side: the row says so
    assert row["measured"].startswith("error: MeasurementTimeout: not run")


def test_the_summary_pairs_each_measured_value_with_its_prediction() -> None:
    """The rows of one figure: a value beside its prediction (ratio measured / predicted), a
    value with no model beside its reason, the plan's figure beside the measured one, a
    prediction whose value was not measured here."""
    predict = _sibling("gpu_check_predict")
    figure = {
        "micro_batch": 2,
        "ratio": 1.5,
        "leviathan": {"step_ms": 3.0, "compile_s": 9.0, "peak_allocated_gb": "not measured"},
        "predicted": {
            "ratio": 1.2,
            "detail": {"ratio_net": 1.1},
            "leviathan": {
                "step_ms": 2.0,
                "plan_step_ms": 4.0,
                "peak_allocated_gb": 1.0,
                "tokens_s": 5.0,
                "none": {"compile_s": "no model"},
            },
        },
    }
    rows = {r["figure"]: r for r in predict.figure_rows("f", figure)}
    assert rows == {
        "f.ratio": {"figure": "f.ratio", "predicted": 1.2, "measured": 1.5, "ratio": 1.5 / 1.2},
        "f.leviathan.step_ms": {
            "figure": "f.leviathan.step_ms",
            "predicted": 2.0,
            "measured": 3.0,
            "ratio": 1.5,
        },
        "f.leviathan.compile_s": {
            "figure": "f.leviathan.compile_s",
            "predicted": "none: no model",
            "measured": 9.0,
            "ratio": None,
        },
        "f.leviathan.peak_allocated_gb": {
            "figure": "f.leviathan.peak_allocated_gb",
            "predicted": 1.0,
            "measured": "not measured",
            "ratio": None,
        },
        "f.leviathan.step_ms (plan)": {
            "figure": "f.leviathan.step_ms (plan)",
            "predicted": 4.0,
            "measured": 3.0,
            "ratio": 0.75,
        },
        "f.leviathan.tokens_s": {
            "figure": "f.leviathan.tokens_s",
            "predicted": 5.0,
            "measured": "not measured",
            "ratio": None,
        },
    }
    assert "f.leviathan.step_ms" in predict.render(list(rows.values()))
