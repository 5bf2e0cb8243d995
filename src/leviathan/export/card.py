"""The model card (README.md) of an exported checkpoint: what it is and where it came from."""

from __future__ import annotations

import json
from typing import Any

from transformers.utils import SAFE_WEIGHTS_NAME

from leviathan.checkpoint.files import WEIGHTS
from leviathan.layout import manifest_path, record_cell_key

VARIANT_INPUTS = {
    "tied": "an ordinary V x D embedding table, shared with the output head",
    "untied": "an ordinary V x D embedding table, with a separate output head",
    "albert": "a V x e table and an e x D projection (ALBERT), multiplied out to V x D",
    "flat_mlp": "a 2-layer SiLU MLP of the id's binary code, evaluated once for every id",
    "factored_mlp": "LEV's digit codebooks and a 2-layer SiLU MLP, evaluated once for every id",
    "leviathan": "LEV, the paper's continuous embedding generator, evaluated once for every id",
}


def model_card(
    checkpoint: dict[str, Any], vocab: dict[str, Any], dtype: str, export_dir: str
) -> str:
    """README.md of an export; `checkpoint` is `Checkpoint.record()`, `vocab` a vocab record."""
    cell = record_cell_key(checkpoint)
    return "\n".join(
        [
            _front_matter(),
            _description(cell, checkpoint["variant"]),
            _record_table(cell, checkpoint, vocab, dtype),
            _usage(export_dir),
            _model_config(checkpoint, export_dir),
        ]
    )


def _front_matter() -> str:
    """The Hub's metadata block."""
    return """---
library_name: transformers
pipeline_tag: text-generation
tags: [leviathan, llama, reproduction]
---
"""


def _description(cell: str, variant: str) -> str:
    """What the model is: the reproduction, the export format, the variant's input table."""
    tied = (
        "yes (`tie_word_embeddings`)"
        if variant == "tied"
        else "no (`lm_head` is the trained output head)"
    )
    return f"""# Leviathan reproduction: {cell}

A decoder-only language model trained by the Leviathan reproduction pipeline (a
reproduction of "Leviathan: Decoupling Input and Output Representations in Language
Models", arXiv 2601.22040), exported as a plain `transformers` `LlamaForCausalLM`: it loads
with `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained`, no custom code.

The input representation of the `{variant}` variant is {VARIANT_INPUTS.get(variant, variant)};
it is stored here as the materialised V x D `embed_tokens` table, so the exported model
computes exactly what the trained one computes. Tied input and output: {tied}.
"""


def _record_table(cell: str, checkpoint: dict[str, Any], vocab: dict[str, Any], dtype: str) -> str:
    """Where the weights came from: cell, step, checkpoint hash, code, tokenizer, dtype."""
    code = checkpoint.get("code") or {}
    commit = code.get("git_commit") or "unknown (not trained from a git checkout)"
    dirty = " (with uncommitted changes)" if code.get("git_dirty") else ""
    return f"""| | |
|---|---|
| cell (scale/vocabulary/variant/seed) | `{cell}` |
| training step / tokens | {checkpoint.get("step")} / {checkpoint.get("tokens")} |
| checkpoint | `{checkpoint["path"]}` |
| checkpoint sha256 ({WEIGHTS}) | `{checkpoint["sha256"]}` |
| code version | leviathan {code.get("leviathan", "?")}, git `{commit}`{dirty} |
| tokenizer | tiktoken `{vocab["encoding"]}` (n_vocab {vocab["n_vocab"]}), BPE file sha256 `{vocab["bpe_sha256"]}` |
| context length | {checkpoint.get("context")} |
| weights dtype | {dtype} |

A model trained on the pipeline's default (embedded, offline) corpus is a smoke-test
artifact: its scores mean nothing about the paper's claims.
"""


def _usage(export_dir: str) -> str:
    """Loading the export with transformers and scoring it with lm-eval."""
    return f"""## Use

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{export_dir}")
tokenizer = AutoTokenizer.from_pretrained("{export_dir}")
```

```bash
lm_eval --model hf --model_args pretrained={export_dir} --tasks hellaswag,arc_easy
```
"""


def _model_config(checkpoint: dict[str, Any], export_dir: str) -> str:
    """The model config as trained, and how to audit the export."""
    config = json.dumps(checkpoint.get("model_config"), indent=2, sort_keys=True)
    return f"""## Model config (as trained)

```json
{config}
```

The export's manifest (`{manifest_path(SAFE_WEIGHTS_NAME)}`) records the sha256 of every file here and
of the checkpoint it came from; `leviathan audit {export_dir}` re-verifies the chain back
to the training data.
"""
