"""The rehearsal's table (bench/rehearse.py): each step measured here, predicted at the study's
size, and the limit the study's config gives it."""

from __future__ import annotations

from typing import Any

from rehearse_steps import VOCABS


def _t(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _mb(rss: float) -> str:
    return f"{rss / 1024:.1f} GB" if rss >= 1024 else f"{rss:.0f} MB"


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(
        self,
        step: str,
        measured: str,
        time_s: float | None,
        time_limit_s: float | None,
        rss_mb: float | None = None,
        mem_limit_mb: float | None = None,
        note: str = "",
    ) -> None:
        over = (time_s is not None and time_limit_s is not None and time_s > time_limit_s) or (
            rss_mb is not None and mem_limit_mb is not None and rss_mb > mem_limit_mb
        )
        self.rows.append(
            {
                "step": step,
                "measured": measured,
                "predicted_s": time_s,
                "predicted_rss_mb": rss_mb,
                "limit_s": time_limit_s,
                "limit_mem_mb": mem_limit_mb,
                "verdict": "OVER" if over else "ok",
                "note": note,
            }
        )

    def render(self) -> str:
        lines = [
            "| step | measured | predicted at the study | limit (config) | verdict |",
            "|---|---|---|---|---|",
        ]
        for r in self.rows:
            pred = [_t(r["predicted_s"])] if r["predicted_s"] is not None else []
            if r["predicted_rss_mb"] is not None:
                pred.append(_mb(r["predicted_rss_mb"]))
            lim = [_t(r["limit_s"])] if r["limit_s"] is not None else []
            if r["limit_mem_mb"] is not None:
                lim.append(_mb(r["limit_mem_mb"]))
            note = f" ({r['note']})" if r["note"] else ""
            lines.append(
                f"| {r['step']} | {r['measured']} | {', '.join(pred)}{note} | "
                f"{', '.join(lim) or '-'} | {r['verdict']} |"
            )
        return "\n".join(lines)

    @property
    def over(self) -> bool:
        return any(r["verdict"] == "OVER" for r in self.rows)


def disk_line(config: dict[str, Any]) -> str:
    """The study's disk estimate, from the plan's own counters (leviathan.cost.plan)."""
    from leviathan.cost.disk import study_disk

    return study_disk(config).line()


def _cpu(step: dict[str, Any], key: str = "cpu_s") -> float:
    """A step's CPU seconds, at least the clock's resolution (a tiny rehearsal may read 0)."""
    return max(float(step[key]), 1e-6)


def build_table(m: dict[str, Any], s: dict[str, Any], config: dict[str, Any]) -> Table:
    """One row per step: measured, predicted at the study, and the limit its config gives."""
    t = Table()
    step_s = {sc: p.gpu_hours * 3600 / p.gpus / p.steps for sc, p in s["scales"].items()}
    _data_rows(t, m, s)
    _run_start_rows(t, m, s, step_s)
    _train_rows(t, m, s, step_s)
    _eval_rows(t, m, s, config)
    return t


def _data_rows(t: Table, m: dict[str, Any], s: dict[str, Any]) -> None:
    """Fetch, then tokenize, counts and word counts of each vocabulary (CPU steps)."""
    rules = s["rules"]
    f = m["fetch"]
    rate = f["bytes"] / _cpu(f)  # one CPU: the fetch is one process
    t.add(
        "fetch (local files, resumable parts)",
        f"{rate / 1e6:.1f} MB/s, {_mb(f['rss_mb'])}",
        s["fetch_bytes"] / rate,
        rules["fetch_corpus"]["runtime"] * 60,
        f["rss_mb"],
        rules["fetch_corpus"]["mem_mb"],
        f"{s['fetch_bytes'] / 1e9:.0f} GB of train text",
    )
    job_cpus = rules["tokenize"]["threads"]
    for v in VOCABS:
        tk = m["tokenize"][v]
        rate = tk["bytes"] / _cpu(tk)  # per CPU; the job runs one process per CPU
        procs = s["tokenize_processes"] or job_cpus
        t.add(
            f"tokenize {v} (+ counts)",
            f"{rate / 1e6:.2f} MB/s per CPU, {_mb(tk['rss_mb'])}, "
            f"{tk['bytes'] / tk['tokens']:.2f} B/token",
            s["tokenize_bytes"][v] / (rate * job_cpus),
            rules["tokenize"]["runtime"] * 60,
            tk["rss_mb"] * procs / tk["processes"],
            rules["tokenize"]["mem_mb"],
            f"{s['tokenize_bytes'][v] / 1e9:.1f} GB on {job_cpus} CPUs",
        )
    for v in VOCABS:
        c = m["counts"][v]
        rate = c["tokens"] / _cpu(c)
        t.add(
            f"counts {v} (from a shard)",
            f"{rate / 1e6:.0f} M tokens/s, {_mb(c['rss_mb'])}",
            s["tokens"][v] / rate,
            rules["tokenize"]["runtime"] * 60,
            c["rss_mb"],
            rules["tokenize"]["mem_mb"],
        )
    for v in VOCABS:
        w = m["word_counts"][v]
        rate = w["tokens"] / _cpu(w)
        n = min(s["word_count_tokens"] or s["tokens"][v], s["tokens"][v])
        t.add(
            f"word counts {v}",
            f"{rate / 1e6:.2f} M tokens/s, {_mb(w['rss_mb'])}",
            n / rate,
            rules["word_counts"]["runtime"] * 60,
            w["rss_mb"],
            rules["word_counts"]["mem_mb"],
            f"{n / 1e9:.1f}B train tokens; memory bounded",
        )


def _run_start_rows(
    t: Table, m: dict[str, Any], s: dict[str, Any], step_s: dict[str, float]
) -> None:
    """The loader against the fastest GPU step; the run-start shard checks against the
    process group's timeout."""
    fastest = min(step_s, key=lambda k: step_s[k])
    lo = m["loader"]
    t.add(
        "loader, global batch 512 x 512",
        f"{_t(lo['cpu_s'])}/batch, {_mb(lo['rss_mb'])}",
        lo["cpu_s"],
        step_s[fastest],
        note=f"per step, against the {fastest} GPU step",
    )
    rs = m["run_start"]
    o200k = s["shard_bytes"]["o200k_base"]
    timeout = s["runtime"].dist_timeout_s
    t.add(
        "run start: size + sampled fingerprint",
        _t(rs["sampled_s"]),
        rs["sampled_s"],
        timeout,
        note="constant in the shard size",
    )
    rate = rs["bytes"] / _cpu(rs, "full_cpu_s")
    t.add(
        "run start: full sha256 (verify_shards=full)",
        f"{rate / 1e9:.2f} GB/s",
        o200k / rate,
        timeout,
        note=f"{o200k / 1e9:.0f} GB o200k shard, before the group is joined",
    )


def _train_rows(t: Table, m: dict[str, Any], s: dict[str, Any], step_s: dict[str, float]) -> None:
    """Training of each scale from the plan's FLOPs; checkpoint save and load of the largest
    state against the interval between checkpoints."""
    tr = m["train"]
    for sc, p in s["scales"].items():
        res = s["resources"][sc]
        t.add(
            f"train {p.cell.key} ({p.gpus} x {p.gpu_model})",
            f"200m on CPU: {_t(tr['seconds'])}/step of 512 tokens, {_mb(tr['rss_mb'])}"
            if sc == "200m"
            else "-",
            p.gpu_hours * 3600 / p.gpus,
            res["runtime"] * 60,
            note=f"{p.steps:,} steps, plan at MFU {p.mfu:.0%} ({p.mfu_source})",
        )
        gpu = s["gpu_memory"].get(sc)
        if gpu is not None and gpu.gpu is not None:
            t.add(
                f"GPU memory per GPU, train {p.cell.key} ({gpu.gpu.name})",
                "-",
                None,
                None,
                rss_mb=gpu.total / 2**20,
                mem_limit_mb=gpu.gpu.memory / 2**20,
                note="its step traced on FakeTensors + allowances (leviathan.cost.memory)",
            )
    ck = m["checkpoint"]
    big = s["scales"].get("1.2b") or max(s["scales"].values(), key=lambda p: p.params)
    save_rate, load_rate = ck["bytes"] / ck["save_s"], ck["bytes"] / ck["load_s"]
    interval = s["runtime"].checkpoint.every * step_s[big.cell.scale]
    for what, rate in (("save", save_rate), ("load", load_rate)):
        t.add(
            f"checkpoint {what}, {big.cell.scale} state ({big.checkpoint_bytes / 1e9:.1f} GB)",
            f"200m ({ck['bytes'] / 1e9:.2f} GB): {rate / 1e9:.2f} GB/s, {_mb(ck['rss_mb'])}",
            big.checkpoint_bytes / rate,
            interval,
            note=f"against checkpoint.every={s['runtime'].checkpoint.every} steps of training",
        )


def _eval_rows(t: Table, m: dict[str, Any], s: dict[str, Any], config: dict[str, Any]) -> None:
    """The plan's own validation job of each scale: the configured sample, one GPU of
    eval_resources.<scale>, its time limit."""
    from leviathan.cost import plan_eval

    ev = m["eval"]
    val_share = m["fetch"]["val_bytes"] / m["fetch"]["bytes"]
    for sc, p in s["scales"].items():
        val = next(e for e in plan_eval.plan_evals(config, p.cell) if e.evaluation == "val")
        if val.gpu_hours is not None:
            predicted, what = val.gpu_hours * 3600, f"{val.tokens / 1e9:.3f}B val tokens (sample)"
        else:  # the whole split (size unknown before it is tokenized) or a CPU job
            tokens = val.tokens or s["tokens"][p.cell.vocab] * val_share
            fwd = p.train_flops / p.tokens / 3  # forward FLOPs per token
            predicted = tokens * fwd * p.gpu_hours * 3600 / p.train_flops
            what = f"{tokens / 1e9:.2f}B val tokens at the training MFU"
        t.add(
            f"eval val {sc} (1 GPU, eval_resources.{sc})",
            f"200m on CPU: {_t(ev['seconds'])}/window of 512, {_mb(ev['rss_mb'])}"
            if sc == "200m"
            else "-",
            predicted,
            val.runtime_hours * 3600,
            note=what,
        )
