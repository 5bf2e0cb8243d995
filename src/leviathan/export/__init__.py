"""Export a trained cell as a `transformers` checkpoint (LlamaForCausalLM + fast tokenizer).

`export_run(run_dir, out, dtype, force)` (`leviathan export RUN_DIR OUT`) writes a directory
that `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained` load with no
custom code; needs the `hf` extra (`pip install -e '.[hf]'`).
"""
