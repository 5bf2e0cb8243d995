"""Sample efficiency from training curves: when does a variant reach the tied baseline?

The baseline's target is its final validation loss (its last `val` record) reached after
T_base training tokens. For another run, `tokens_to_target` is the first evaluation point
whose validation loss is at or below the target (`tokens_interpolated`: linear
interpolation between that point and the one before, a finer estimate between sparse
evaluations), and `ratio` = T_base / tokens (the paper's "2.1x fewer tokens"). A run that
never reaches the target has ratio null. `trails_until_tokens` is the last evaluation point,
among those both runs share, where the run's loss is above the baseline's (null if it never
is): the paper's "trails tied before ~3B tokens".

Curves come from the trainer's metrics.jsonl (`kind: val` records: step, tokens, val_loss),
each checked first against what anchors it (its manifest and its final checkpoint's records,
leviathan.train.log_anchor): an edited log is refused. A resumed run may repeat a step, the
last record of a step wins. Both runs must be of the same scale and vocabulary and have been
validated the same way (the trainer's runtime.validation.windows), which metrics.jsonl does not
record: keep it fixed per study.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leviathan.checkpoint.files import final_dir, state_file, weights_file
from leviathan.eval.errors import EvalInputError
from leviathan.eval.results import envelope
from leviathan.io import read_json, sha256_file
from leviathan.layout import METRICS, metrics_file
from leviathan.provenance import utc_now
from leviathan.train.log_anchor import verify_log
from leviathan.train.metrics_log import read_metrics


@dataclass(frozen=True)
class Curve:
    run: Path
    tokens: tuple[int, ...]
    losses: tuple[float, ...]
    train_config: dict[str, Any]

    @property
    def final_loss(self) -> float:
        return self.losses[-1]

    @property
    def final_tokens(self) -> int:
        return self.tokens[-1]


def metrics_path(run: str | os.PathLike[str]) -> Path:
    p = Path(run)
    path = p if p.is_file() else metrics_file(p)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no training metrics; pass a run directory holding {METRICS}"
        )
    return path


def read_curve(run: str | os.PathLike[str]) -> Curve:
    """The validation curve of a run directory (or its metrics.jsonl), refused where the log is
    not as training wrote it (leviathan.train.log_anchor: its manifest, the records its final
    checkpoint fixed, the final's validation loss)."""
    path = metrics_path(run)
    verify_log(path.parent)
    return curve_from_log(path)


def curve_from_log(path: Path) -> Curve:
    """The validation curve a metrics log holds, as it is (`read_curve` checks it first)."""
    by_step: dict[int, dict[str, Any]] = {}
    for rec in read_metrics(path, "val"):
        if rec.get("val_loss") is not None:
            by_step[int(rec["step"])] = rec
    if not by_step:
        raise EvalInputError(f"{path}: has no validation records (train with a validation shard)")
    rows = [by_step[s] for s in sorted(by_step)]
    starts = read_metrics(path, "start")
    tc = dict(starts[0].get("train_config") or {}) if starts else {}
    return Curve(
        path.parent,
        tuple(int(r["tokens"]) for r in rows),
        tuple(float(r["val_loss"]) for r in rows),
        tc,
    )


def tokens_to_reach(curve: Curve, target: float) -> tuple[int | None, float | None]:
    """(first evaluated tokens with loss <= target, interpolated tokens) or (None, None)."""
    for i, (t, loss) in enumerate(zip(curve.tokens, curve.losses, strict=True)):
        if loss <= target:
            if i == 0:
                return t, float(t)
            t0, l0 = curve.tokens[i - 1], curve.losses[i - 1]
            frac = (l0 - target) / (l0 - loss) if l0 != loss else 1.0
            return t, t0 + frac * (t - t0)
    return None, None


def trails_until(curve: Curve, baseline: Curve) -> int | None:
    base = dict(zip(baseline.tokens, baseline.losses, strict=True))
    shared = [(t, loss) for t, loss in zip(curve.tokens, curve.losses, strict=True) if t in base]
    behind = [t for t, loss in shared if loss > base[t]]
    return max(behind) if behind else None


def _label(curve: Curve) -> Any:
    """The run's variant as its study names it (a named variant or a tagged cell's
    `variant_name`), else its variant."""
    return curve.train_config.get("variant_name") or curve.train_config.get("variant")


def compare(baseline: Curve, run: Curve) -> dict[str, Any]:
    target = baseline.final_loss
    first, interp = tokens_to_reach(run, target)
    return {
        "run": str(run.run),
        "variant": _label(run),
        "final_val_loss": run.final_loss,
        "final_tokens": run.final_tokens,
        "reached": first is not None,
        "tokens_to_target": first,
        "tokens_interpolated": interp,
        "ratio": baseline.final_tokens / first if first else None,
        "ratio_interpolated": baseline.final_tokens / interp if interp else None,
        "trails_until_tokens": trails_until(run, baseline),
        "curve": [
            {"tokens": t, "val_loss": v} for t, v in zip(run.tokens, run.losses, strict=True)
        ],
    }


def _check_comparable(baseline: Curve, run: Curve) -> None:
    for key in ("scale", "vocab", "context"):
        a, b = baseline.train_config.get(key), run.train_config.get(key)
        if a is not None and b is not None and a != b:
            raise EvalInputError(
                f"{run.run} ({key}={b!r}) is not comparable with the baseline {baseline.run} "
                f"({key}={a!r}): compare runs of the same scale, vocabulary and context"
            )


def _run_record(curve: Curve, role: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "role": role,
        "path": str(metrics_file(curve.run)),
        "sha256": sha256_file(metrics_file(curve.run)),
    }
    final = final_dir(curve.run)
    if weights_file(final).is_file():
        rec["checkpoint_sha256"] = sha256_file(weights_file(final))
        rec["checkpoint_step"] = read_json(state_file(final)).get("step")
    return rec


def sample_efficiency(
    baseline: str | os.PathLike[str],
    runs: list[str | os.PathLike[str]],
    started: _dt.datetime | None = None,
) -> dict[str, Any]:
    """The `sample_efficiency` evaluation output of runs against a (tied) baseline run.

    `started`: when the command began (default: now)."""
    started = started or utc_now()
    t0 = time.perf_counter()
    if not runs:
        raise EvalInputError("name at least one run to compare with the baseline")
    base = read_curve(baseline)
    curves = [read_curve(r) for r in runs]
    for c in curves:
        _check_comparable(base, c)
    inputs = [_run_record(base, "baseline")] + [_run_record(c, "run") for c in curves]
    return envelope(
        "sample_efficiency",
        checkpoint=None,
        inputs=inputs,
        config={},
        results=results_of(base, curves),
        seconds=time.perf_counter() - t0,
        started=started,
    )


def results_of(base: Curve, curves: list[Curve]) -> dict[str, Any]:
    """The `results` of a sample-efficiency output: the baseline's target and each run's
    comparison with it (`leviathan audit` recomputes them from the logs)."""
    return {
        "baseline": {
            "run": str(base.run),
            "variant": _label(base),
            "target_val_loss": base.final_loss,
            "tokens": base.final_tokens,
            "curve": [
                {"tokens": t, "val_loss": v} for t, v in zip(base.tokens, base.losses, strict=True)
            ],
        },
        "runs": [compare(base, c) for c in curves],
    }
