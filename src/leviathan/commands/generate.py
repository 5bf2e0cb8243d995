"""`leviathan generate RUN_DIR --prompt TEXT`: samples of a trained cell (greedy or at a
temperature), through the evaluation model (the input table materialised once)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "generate",
        help="sample text from a trained cell (greedy, or at a temperature with a seed)",
        description="Continue PROMPT with a trained cell's final checkpoint (or a checkpoint "
        "directory). --temperature 0 (the default) is greedy decoding; above 0 each token is "
        "drawn from softmax(logits / T), among the --top-k most likely if given, seeded by "
        "--seed. Generation stops after --max-new-tokens or at the end-of-text token.",
    )
    p.add_argument(
        "run_dir", type=Path, help="run directory (its checkpoints/final) or a checkpoint directory"
    )
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument(
        "--max-new-tokens", type=int, default=64, help="at most the model's context (default 64)"
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=1, help="samples (seeds seed, seed+1, ...)")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda:N")
    p.add_argument("--json", action="store_true", help="one JSON line per sample (ids and text)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from leviathan.data.tokenizers import load_tokenizer
    from leviathan.eval.checkpoint import open_checkpoint
    from leviathan.eval.generate import Sampling, generate

    if args.samples < 1:
        raise ValueError(f"--samples {args.samples}: must be >= 1")
    ckpt, model = open_checkpoint(args.run_dir, device=args.device)
    tok = load_tokenizer(ckpt.vocab.name)
    prompt = tok.encode(args.prompt)
    for k in range(args.samples):
        sampling = Sampling(
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed + k,
            stop_id=ckpt.vocab.eot_id,
        )
        new = generate(model, prompt, sampling)
        text = tok.decode(new)
        if args.json:
            print(
                json.dumps({"seed": sampling.seed, "prompt_ids": prompt, "ids": new, "text": text})
            )
        else:
            print(f"--- sample {k + 1} (seed {sampling.seed}, temperature {args.temperature})")
            print(args.prompt + text)
    return 0
