"""`leviathan export RUN_DIR OUT [--dtype float32|bfloat16] [--force]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from leviathan.export.hf import DTYPES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "export",
        help="export a trained run as a transformers checkpoint (LlamaForCausalLM + tokenizer)",
        description="Write OUT so that transformers' AutoModelForCausalLM.from_pretrained(OUT) and "
        "AutoTokenizer.from_pretrained(OUT) load the run's final checkpoint with no custom code "
        "(generated inputs such as LEV become the materialised embedding table). Needs the hf "
        "extra: pip install -e '.[hf]'.",
    )
    p.add_argument(
        "run_dir", type=Path, help="run directory (its checkpoints/final) or a checkpoint directory"
    )
    p.add_argument(
        "out", type=Path, help="output directory (written atomically: temp dir + rename)"
    )
    p.add_argument(
        "--dtype",
        default="float32",
        help=f"weights dtype: {' or '.join(DTYPES)} (default: %(default)s)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace OUT if it is an earlier export (never a run or any other folder)",
    )
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    try:
        from leviathan.export.write import export_run
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ValueError(
            f"{exc}: `leviathan export` needs the hf extra: pip install -e '.[hf]'"
        ) from exc
    result = export_run(args.run_dir, args.out, dtype=args.dtype, force=args.force)
    m = result.manifest
    print(
        json.dumps(
            {
                "out": str(result.out),
                "sha256": m["artifact"]["sha256"],
                "checkpoint_sha256": m["checkpoint"]["sha256"],
                "dtype": args.dtype,
            }
        )
    )
    return 0
