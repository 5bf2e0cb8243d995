"""Cost of the full check of a token shard's sha256 at a run start (`verify_shards: full`).

With `runtime.verify_shards: full` the trainer hashes every training shard in full when a run
starts or resumes (the default checks a sampled fingerprint). This times
`leviathan.io.sha256_file` against its floor, one plain sequential read of the same file
(`readinto` of 1 MiB chunks, no hashing), in the same run, and extrapolates the hash's cost
per run start to the paper's largest shard (24.1B o200k tokens, uint32: 96.4 GB).

    .venv/bin/python bench/bench_shard_verify.py --mib 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from leviathan.io import sha256_file

PAPER_SHARD_BYTES = 24_100_000_000 * 4  # the 1.2B budget in o200k tokens (uint32)


def plain_read(path: Path) -> int:
    buf = bytearray(1 << 20)
    total = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            total += n
    return total


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mib", type=int, default=1024, help="size of the test file")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.bin"
        with open(path, "wb") as fh:
            for _ in range(args.mib):
                fh.write(os.urandom(1 << 20))
        plain_read(path)  # page cache warm for both, alternating
        read_s, hash_s = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            plain_read(path)
            read_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sha256_file(path)
            hash_s.append(time.perf_counter() - t0)
    size = args.mib << 20
    r, h = statistics.median(read_s), statistics.median(hash_s)
    print(f"file {args.mib} MiB, {args.rounds} rounds (medians, page cache warm)")
    print(f"plain read  {size / r / 1e9:6.2f} GB/s")
    print(f"sha256_file {size / h / 1e9:6.2f} GB/s   ratio to the read: {h / r:.2f}")
    print(
        f"per run start at the paper's largest shard ({PAPER_SHARD_BYTES / 1e9:.1f} GB): "
        f"{PAPER_SHARD_BYTES / (size / h):.0f} s of hashing (a cold disk adds its read time)"
    )


if __name__ == "__main__":
    main()
