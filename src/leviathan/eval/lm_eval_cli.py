"""`leviathan-lm-eval`: lm-evaluation-harness's own command line, with the `leviathan` model.

lm-eval 0.4 has no plugin discovery for models (its registry holds what was imported), so this
entry point imports our model (which registers itself under `leviathan`) and then runs
lm-eval's CLI unchanged: every flag, task and output option is lm-eval's own.

    leviathan-lm-eval --model leviathan --model_args pretrained=results/runs/embedded/micro/gpt2/leviathan/seed0 \\
        --tasks piqa --batch_size 16 --output_path results/lm_eval --log_samples
    python -m leviathan.eval.lm_eval_cli ...      (the same)
"""

from __future__ import annotations


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    import leviathan.eval.lm_eval_adapter  # noqa: F401  (registers the `leviathan` model)

    cli_evaluate()


if __name__ == "__main__":
    main()
