"""The data step's evaluation datasets (leviathan.data.eval_fetch), read back by the evaluations
with the Hub unreachable (leviathan.eval.fetched). The source is a local copy laid out as the
Hub's dataset repositories (`<owner>/<name>/<config>/<split>-00000-of-00001.parquet` and the
README's `configs`), read by the same `datasets` loader the Hub download goes through."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from leviathan import layout
from leviathan.data.eval_data import Need, need_bytes, needs, read_source
from leviathan.data.eval_fetch import EvalDataError, fetch_need
from leviathan.eval.config import eval_config
from leviathan.eval.errors import EvalInputError, HubUnreachable
from leviathan.eval.fetched import fetched_files
from leviathan.eval.run import EvalFiles, run_evaluation

ROOT = Path(__file__).resolve().parents[2]
WIKITEXT_STAND_IN = ROOT / "workflow/resources/smoke/wikitext_document_level_test.jsonl"
WIKITEXT_REPO = ("EleutherAI/wikitext_document_level", "wikitext-103-raw-v1")
ARC_REPO = ("allenai/ai2_arc", "ARC-Easy")
CONFIG = {
    "evaluate": {
        "val": {},
        "wikitext": {"batch_size": 4},
        "lm_eval": {"tasks": ["arc_easy"], "bootstrap_iters": 0, "batch_size": 4},
    }
}


def _rows(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def hub_repo(root: Path, repo: tuple[str, str], splits: dict[str, list[dict[str, Any]]]) -> Path:
    """A dataset repository as the Hub lays it out: one parquet file per split of the config,
    mapped by the README's `configs` section."""
    import datasets

    dataset, config = repo
    where = root / dataset
    lines = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
    for split, rows in splits.items():
        path = where / config / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_list(rows).to_parquet(str(path))
        lines += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (where / "README.md").write_text("\n".join([*lines, "---", ""]))
    return where


@pytest.fixture
def mirror(tmp_path: Path, task_files: dict[str, dict[str, str]], monkeypatch) -> Path:
    """The Hub's repositories of WikiText-103 and ARC-Easy (a train split too, never read at
    zero shots), and a working directory of its own (data/eval/ is relative to it)."""
    root = tmp_path / "hub"
    pages = _rows(WIKITEXT_STAND_IN)
    hub_repo(root, WIKITEXT_REPO, {"test": pages, "train": pages[:1]})
    arc = _rows(task_files["arc_easy"]["test"])
    hub_repo(root, ARC_REPO, {"test": arc, "train": arc[:2]})
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return root


@pytest.mark.slow
def test_the_data_steps_evaluation_data_is_read_back_offline(
    loaded, mirror: Path, task_files, unreachable_hub, monkeypatch
) -> None:
    """Fetched from the local copy, then evaluated with the Hub unreachable: the same documents
    (lm-eval's task hash) and the same numbers as the original files give."""
    ckpt, model = loaded
    cfg = eval_config(CONFIG)
    wanted = needs(CONFIG)
    assert [n.key for n in wanted] == ["wikitext", "lm_eval/arc_easy"]
    with pytest.raises(HubUnreachable):  # nothing fetched yet: the Hub would be needed
        run_evaluation("wikitext", ckpt, model, cfg.wikitext, None, EvalFiles())
    for need in wanted:
        source = fetch_need(need, mirror=mirror)
        assert set(source["splits"]) == {"test"}  # the split read, not the train split
        assert need_bytes(need) == (
            sum(layout.eval_data_split(need.key, s).stat().st_size for s in source["splits"]),
            "measured",
        )
    assert not layout.eval_data_split("wikitext", "train").exists()

    attempts: list[object] = []

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError(f"no network in this test ({address})")

    monkeypatch.setattr(socket.socket, "connect", connect)
    stand_ins = {
        "wikitext": replace(cfg.wikitext, data_files={"test": str(WIKITEXT_STAND_IN)}),
        "lm_eval": replace(cfg.lm_eval, data={"arc_easy": {"data_files": task_files["arc_easy"]}}),
    }
    for evaluation, reference_settings in stand_ins.items():
        got = run_evaluation(evaluation, ckpt, model, getattr(cfg, evaluation), None, EvalFiles())
        want = run_evaluation(evaluation, ckpt, model, reference_settings, None, EvalFiles())
        got_task, want_task = _task(got), _task(want)
        assert got_task["data"]["kind"] == "local"
        files = [f["path"] for fs in got_task["data"]["data_files"].values() for f in fs]
        assert files and all(
            Path(f).is_relative_to(Path(layout.EVAL_DATA_ROOT).resolve()) for f in files
        )
        assert got_task["task_hash"] == want_task["task_hash"]
        assert got_task["n_samples"] == want_task["n_samples"]
        assert _metrics(got) == _metrics(want)
    assert not attempts  # nothing asked the network (a dropping firewall would hang it)


def _task(doc: dict[str, Any]) -> dict[str, Any]:
    results = doc["results"]
    return results["lm_eval"] if "lm_eval" in results else results["tasks"]["arc_easy"]


def _metrics(doc: dict[str, Any]) -> dict[str, Any]:
    results = doc["results"]
    if "tasks" in results:
        return results["tasks"]["arc_easy"]["metrics"]
    return {k: results[k] for k in ("word_perplexity", "byte_perplexity", "bits_per_byte")}


def test_a_killed_fetch_resumes_after_its_last_whole_split(mirror: Path, task_files) -> None:
    """Few-shot ARC reads test and train: a fetch that dies on train keeps test, and the rerun
    fetches train only (test, changed at the source since, is not read again)."""
    need = Need("lm_eval", "arc_easy", num_fewshot=1)
    train = mirror / ARC_REPO[0] / ARC_REPO[1] / "train-00000-of-00001.parquet"
    train.write_bytes(b"not a parquet file")
    with pytest.raises(EvalDataError, match="cannot read .*split 'train'"):
        fetch_need(need, mirror=mirror)
    test = layout.eval_data_split(need.key, "test")
    first = test.read_bytes()
    assert not need.source.exists() and read_source(need.key) is None
    assert not layout.eval_data_split(need.key, "train").exists()

    arc = _rows(task_files["arc_easy"]["test"])
    hub_repo(mirror, ARC_REPO, {"test": arc[::-1], "train": arc[:2]})  # train readable again
    source = fetch_need(need, mirror=mirror)
    assert set(source["splits"]) == {"test", "train"} and source["splits"]["train"]["rows"] == 2
    assert test.read_bytes() == first  # kept, not fetched again
    assert fetched_files(need) == {
        s: str(layout.eval_data_split(need.key, s)) for s in ("test", "train")
    }


def test_a_fetched_folder_of_other_data_is_refused_with_the_command(mirror: Path) -> None:
    wikitext = needs(CONFIG)[0]
    fetch_need(wikitext, mirror=mirror)
    assert fetched_files(wikitext) == {"test": str(layout.eval_data_split("wikitext", "test"))}
    other = replace(wikitext, name="wikitext-2-raw-v1")
    with pytest.raises(EvalInputError, match="'wikitext-103-raw-v1' where the evaluation reads "):
        fetched_files(other)
    assert fetched_files(Need("lm_eval", "piqa")) is None  # never fetched: left to the Hub
    arc = Need("lm_eval", "arc_easy")
    fetch_need(arc, mirror=mirror)
    with pytest.raises(EvalInputError, match=r"no split train: .*`snakemake all_data"):
        fetched_files(replace(arc, num_fewshot=5))


def test_the_plan_states_what_the_data_step_fetches() -> None:
    """`leviathan config show`: one line per dataset the paper's evaluations read from the Hub,
    the total their sum; the default config (stand-ins) fetches none."""
    from leviathan.data.eval_data import plan_lines
    from leviathan.study.config import resolve

    paper = resolve([ROOT / "config" / "paper.yaml"], root=ROOT)
    wanted = needs(paper)
    assert [n.key for n in wanted] == ["wikitext"] + [
        f"lm_eval/{t}" for t in paper["evaluate"]["lm_eval"]["tasks"]
    ]
    head, *rows = plan_lines(paper)
    total = sum(need_bytes(n)[0] or 0 for n in wanted)
    assert f"{len(wanted)} from the Hub" in head and f"{total / 1e6:,.1f} MB" in head
    assert [r.split()[0] for r in rows] == [n.key for n in wanted]
    assert "none fetched" in plan_lines(resolve(root=ROOT))[0]


@pytest.mark.slow
def test_the_plan_shows_the_evaluation_datasets() -> None:
    from leviathan.cost.plan_text import render_plan
    from leviathan.data.eval_data import plan_lines
    from leviathan.study.config import resolve

    paper = resolve([ROOT / "config" / "paper.yaml"], root=ROOT)
    shown = render_plan(paper, memory=False).splitlines()
    assert all(line in shown for line in plan_lines(paper))
