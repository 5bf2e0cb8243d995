"""The three official vocabularies of the study: one home for their facts.

Every artifact records the vocabulary it was made with (name, size, file sha256, EOT id);
those facts come from here. Tokenizer *loading* (offline BPE files) lives in
`leviathan.data.tokenizers`; the model only needs the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VocabSpec:
    name: str  # the name used in configs and cell paths
    encoding: str  # tiktoken encoding name
    n_vocab: int  # tiktoken's n_vocab (mergeable ranks + special tokens)
    eot_id: int  # <|endoftext|>, written between documents
    bpe_file: str  # file name of the official BPE ranks
    bpe_sha256: str  # tiktoken's official expected hash of that file


VOCABS: dict[str, VocabSpec] = {
    spec.name: spec
    for spec in (
        VocabSpec(
            name="gpt2",
            encoding="r50k_base",
            n_vocab=50257,
            eot_id=50256,
            bpe_file="r50k_base.tiktoken",
            bpe_sha256="306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        ),
        VocabSpec(
            name="cl100k_base",
            encoding="cl100k_base",
            n_vocab=100277,
            eot_id=100257,
            bpe_file="cl100k_base.tiktoken",
            bpe_sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        ),
        VocabSpec(
            name="o200k_base",
            encoding="o200k_base",
            n_vocab=200019,
            eot_id=199999,
            bpe_file="o200k_base.tiktoken",
            bpe_sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        ),
    )
}

# Aliases users type; the canonical name is what artifacts and cell paths record.
ALIASES = {"r50k_base": "gpt2", "cl100k": "cl100k_base", "o200k": "o200k_base"}


def get_vocab(name: str) -> VocabSpec:
    """Look a vocabulary up by name or alias; unknown names list the valid ones."""
    key = ALIASES.get(name, name)
    try:
        return VOCABS[key]
    except KeyError:
        valid = ", ".join(sorted(VOCABS))
        raise ValueError(
            f"unknown vocabulary {name!r}: use one of {valid} "
            f"(aliases: {', '.join(sorted(ALIASES))})"
        ) from None


def check_covers(
    vocab_size: int, vocab: str, *, fix: str, error: type[ValueError] = ValueError
) -> None:
    """Refuse a model of `vocab_size` ids that cannot embed or score every id of `vocab`
    (tiktoken's n_vocab): `error` names both sizes, then `fix` (what the caller's user does)."""
    spec = get_vocab(vocab)
    if vocab_size < spec.n_vocab:
        raise error(f"model vocab_size={vocab_size} < {spec.name}'s n_vocab={spec.n_vocab}: {fix}")
