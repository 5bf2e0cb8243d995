"""`leviathan eval ...` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from leviathan.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    rc = main(argv)
    cap = capsys.readouterr()
    lines = [line for line in cap.out.splitlines() if line.startswith("{")]
    return rc, (json.loads(lines[-1]) if lines else {}), cap.err


def test_val_with_word_counts(
    runs, small_val: Path, gpt2_shards: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    import datetime as dt

    from leviathan.provenance import config_sha256

    monkeypatch.setenv("SLURM_JOB_ID", "31337")
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    wc = tmp_path / "wc.json"
    rc, summary, _ = run(
        [
            "eval",
            "word-counts",
            "--train",
            str(gpt2_shards / "train.bin"),
            "--val",
            str(small_val),
            "--out",
            str(wc),
        ],
        capsys,
    )
    assert rc == 0
    assert summary["val_word_types"] > 0
    out = tmp_path / "val.json"
    rc, summary, _ = run(
        [
            "eval",
            "val",
            "--checkpoint",
            str(runs["tied"]),
            "--val",
            str(small_val),
            "--counts",
            str(gpt2_shards / "counts.npy"),
            "--word-counts",
            str(wc),
            "--device",
            "cpu",
            "--quantile-bins",
            "4",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["kind"] == "val"
    assert result["checkpoint"]["variant"] == "tied"
    assert summary["loss"] == result["results"]["overall"]["loss"]
    assert len(result["results"]["frequency_tokens"]["quantile"]) <= 4
    assert "frequency_words" in result["results"]
    # provenance: the same fields as every manifest, the command's start, the chain to the checkpoint's manifest
    for r in (result, json.loads(wc.read_text())):
        assert r["config_sha256"] == config_sha256(r["config"])
        assert r["env"]["slurm_job_id"] == "31337"
        assert r["env"]["packages"]["lm_eval"]
        assert r["code"]["leviathan"]
        assert "git_commit" in r["code"]
        started, finished = (
            dt.datetime.fromisoformat(r[k]) for k in ("started_utc", "finished_utc")
        )
        assert before <= started <= finished
        assert r["created_utc"] == r["finished_utc"]
    assert result["env"]["device"] == "cpu"
    manifest = json.loads(
        (runs["tied"] / "checkpoints" / "final" / "model.safetensors.json").read_text()
    )
    assert result["checkpoint"]["manifest"].endswith("checkpoints/final/model.safetensors.json")
    assert manifest["artifact"]["sha256"] == result["checkpoint"]["sha256"]
    assert [i["role"] for i in manifest["inputs"]] == ["train_tokens", "val_tokens"]


def test_wikitext_and_lm_eval_with_a_config_file(runs, task_files, tmp_path: Path, capsys) -> None:
    import datasets

    wiki = tmp_path / "wiki.parquet"
    datasets.Dataset.from_dict(
        {"page": [" = Title = \n \n Some text about things .\n \n" * 5] * 2}
    ).to_parquet(str(wiki))
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "eval": {
                    "wikitext": {"data_files": {"test": str(wiki)}, "stride": 32},
                    "lm_eval": {
                        "tasks": ["piqa"],
                        "data": {"piqa": {"data_files": task_files["piqa"]}},
                        "bootstrap_iters": 0,
                    },
                }
            }
        )
    )

    def with_config(command: str, out: Path) -> tuple[int, dict, str]:
        argv = ["eval", command, "--checkpoint", str(runs["leviathan"]), "--config", str(cfg)]
        return run([*argv, "--device", "cpu", "--out", str(out)], capsys)

    out = tmp_path / "wikitext.json"
    rc, summary, _ = with_config("wikitext", out)
    assert rc == 0
    assert json.loads(out.read_text())["config"]["stride"] == 32
    assert summary["tokens"] > 0
    assert summary["documents"] == 2
    assert summary["word_perplexity"] > 1
    out = tmp_path / "lm_eval.json"
    rc, summary, _ = with_config("lm-eval", out)
    assert rc == 0
    assert set(summary["acc"]) == {"piqa"}
    assert Path(summary["samples"]).is_file()
    assert json.loads(out.read_text())["results"]["samples"]["count"] == 3
    # --task-data on the command line instead of the config file
    rc, summary, _ = run(
        [
            "eval",
            "lm-eval",
            "--checkpoint",
            str(runs["leviathan"]),
            "--tasks",
            "winogrande",
            "--task-data",
            f"winogrande:validation={task_files['winogrande']['validation']}",
            "--bootstrap-iters",
            "0",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "w.json"),
        ],
        capsys,
    )
    assert rc == 0
    assert set(summary["acc"]) == {"winogrande"}


def test_sample_efficiency(runs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "se.json"
    rc, summary, _ = run(
        [
            "eval",
            "sample-efficiency",
            "--baseline",
            str(runs["tied"]),
            "--run",
            str(runs["leviathan"]),
            "--out",
            str(out),
        ],
        capsys,
    )
    result = json.loads(out.read_text())
    assert rc == 0
    assert result["kind"] == "sample_efficiency"
    assert result["started_utc"] <= result["finished_utc"]
    assert result["config_sha256"]


def test_errors_are_messages_not_tracebacks(
    runs, small_val: Path, tmp_path: Path, capsys, unreachable_hub
) -> None:
    rc, _, err = run(
        [
            "eval",
            "val",
            "--checkpoint",
            str(tmp_path / "nope"),
            "--val",
            str(small_val),
            "--out",
            str(tmp_path / "x.json"),
        ],
        capsys,
    )
    assert rc == 2
    assert "not a checkpoint" in err
    assert "Traceback" not in err
    rc, _, err = run(
        [
            "eval",
            "lm-eval",
            "--checkpoint",
            str(runs["tied"]),
            "--tasks",
            "piqa",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "x.json"),
        ],
        capsys,
    )
    assert rc == 2
    assert "unreachable" in err
    assert "--task-data" in err
    rc, _, err = run(
        [
            "eval",
            "lm-eval",
            "--checkpoint",
            str(runs["tied"]),
            "--task-data",
            "piqa=x.jsonl",
            "--out",
            str(tmp_path / "x.json"),
        ],
        capsys,
    )
    assert rc == 2
    assert "TASK:SPLIT=FILE" in err
    assert not (tmp_path / "x.json").exists()


def test_lm_eval_task_yamls_load_in_lm_eval_on_the_same_files(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """`leviathan eval lm-eval-tasks`: lm-eval's own TaskManager loads them, on our local files."""
    from lm_eval.tasks import TaskManager

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    rc, summary, _ = run(["eval", "lm-eval-tasks", "--out", str(tmp_path)], capsys)
    assert rc == 0
    assert set(summary["tasks"]) == {
        "hellaswag",
        "arc_easy",
        "arc_challenge",
        "piqa",
        "winogrande",
        "lambada_openai",
    }
    tm = TaskManager(
        include_defaults=False, include_path=str(tmp_path)
    )  # the YAMLs include the official ones
    piqa = tm.load(["piqa"])["tasks"]["piqa"]
    local = root / "workflow/resources/smoke/lm_eval/piqa_validation.jsonl"
    assert len(list(piqa.validation_docs())) == sum(1 for _ in open(local))
    assert piqa.config.dataset_kwargs["data_files"]["validation"] == [str(local)]
    # on the stand-ins, lm-eval's results name the task as such (its alias), not as the benchmark
    assert piqa.config.task_alias == "piqa (stand-in)"


@pytest.mark.slow  # three CPU passes over the validation sample (~50 s on a loaded machine)
def test_val_from_the_command_line_resumes_a_killed_pass(
    runs, small_val: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """`leviathan eval val` keeps its running sums beside --out every --persist-seconds, as
    the workflow's val rule does: a rerun after the pass died continues from them and writes
    the numbers of an uninterrupted run, then removes them."""
    from leviathan import layout
    from leviathan.eval.checkpoint import EvalModel

    def argv(out: Path) -> list[str]:
        return [
            "eval",
            "val",
            "--checkpoint",
            str(runs["leviathan"]),
            "--val",
            str(small_val),
            "--device",
            "cpu",
            "--batch-size",
            "2",
            "--persist-seconds",
            "0",
            "--out",
            str(out),
        ]

    rc, whole, _ = run(argv(tmp_path / "whole.json"), capsys)
    assert rc == 0
    assert whole["resumed_windows"] == 0
    out = tmp_path / "val.json"
    real, calls = EvalModel.token_losses, []

    def dying(self: EvalModel, x, y):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt  # what a kill does to the pass
        return real(self, x, y)

    with monkeypatch.context() as m:
        m.setattr(EvalModel, "token_losses", dying)
        with pytest.raises(KeyboardInterrupt):
            main(argv(out))
    assert layout.eval_partial(out).is_file()
    assert not out.exists()
    rc, summary, _ = run(argv(out), capsys)
    assert rc == 0
    assert summary["resumed_windows"] == 3 * 2
    for key in ("loss", "perplexity", "bits_per_byte", "targets"):
        assert summary[key] == whole[key]
    assert not layout.eval_partial(out).exists()
