"""A checkpoint on disk: its files named, written, verified and read in this package alone.

A checkpoint is a directory `<run>/checkpoints/step_<N>/` (or `final/`) holding
  model.safetensors   the weights (safetensors: no pickle)
  optim.pt            optimizer state (loaded with torch.load(weights_only=True)); an FSDP
                      run writes `optim/` instead, DCP's shards (`sharded.py`)
  rng.pt              torch CPU/CUDA, NumPy and Python RNG states (weights_only too)
  state.json          step, tokens, loader state (with its data fingerprint), the train and
                      model configs with the config fingerprint, code version, metrics
  model.safetensors.json
                      the manifest (kind "checkpoint", `leviathan.manifest`): sha256 of the
                      weights and (`files`) of the other files, the token shards trained and
                      validated on, the train config and its sha256, code, environment,
                      start/end time, (`resumed_from`) the verified checkpoint the run resumed
                      from, (`kept`) the kept checkpoints so far, (`metrics_log`) the sha256 of
                      the run's log up to this step and (`state`) state.json whole.
A kept checkpoint (`checkpoints/kept/step_<N>/`, `kept.py`) holds the weights, state.json and
their manifest only. The exact names are in `files.py`.

It is written under a temporary name and renamed into place only when complete, so a
directory named `step_*`/`final` is always whole; `state.json` and then the manifest are
written last (the manifest records the final directory's path, not the temporary one).

Modules, one job each (`files` and `integrity` import no torch: the workflow's parse, the
study's status and the audit read them):
  files.py      the names of the folders and files, and their paths
  integrity.py  the manifest: written at save, every file checked against it before a read;
                a finished run's state.json put back from the manifest's copy
  read.py       read one's files (safe loaders only)
  store.py      write one (atomically, from a host snapshot), find the newest, prune
  rng.py        the RNG states a checkpoint records
  sharded.py    an FSDP run's optimizer shards (DCP): read whole or resharded
  kept.py       kept checkpoints: weights at log-spaced steps, kept for good
"""
