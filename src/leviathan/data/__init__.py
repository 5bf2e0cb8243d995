"""Data layer: corpora -> offline tokenizers -> token shards + counts -> training batches.

Modules, one job each:
    corpus      on-disk corpus format (<split>.jsonl.zst): resumable writing, cleaning, hash
                splits
    fetch_state the state of an unfinished fetch, and the identity of its source files
    jsonl       `jsonl_lines`, the one reader of JSONL(.zst) files
    embedded    the embedded default corpus (CPython stdlib prose)
    sources     local text, any HF dataset (streaming), The Pile (Hub mirror or local)
    fetch       source -> corpus directory
    fetch_dispatch  a corpus's settings (config `corpus:`, `leviathan data fetch`) -> its fetch
    tokenizers  offline-first tiktoken vocabularies with sha256-checked BPE files
    encode      corpus lines -> packed token ids, on threads and worker processes
    workers     worker processes that die with the process that started them
    shards      corpus split -> <split>.bin token shard; validated memmap opening
    counts      per-id train counts (int64[V] .npy)
    prepare     corpus -> shards + counts for one vocabulary
    loader      deterministic, DDP-shardable, resumable train batches; validation windows
    inspect     summaries / checks for `leviathan data inspect`

Every artifact gets its manifest from `leviathan.manifest` (shared with checkpoints); the
`leviathan data ...` commands live in `leviathan.commands.data`.
"""
