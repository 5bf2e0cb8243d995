"""The fingerprint of the batch a step trains on, as the metrics log records it (`batch_sha256`).

Each rank hashes the rows it trains (`leviathan.data.batch_view.row_digests`: 32 bytes a row);
with several ranks the digests are gathered to every rank in rank order (one all-gather of
32 x rows-per-rank bytes), which is the global row order, so the fingerprint does not depend on
the number of ranks and equals `leviathan data batch`'s for the same step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from leviathan.data.batch_view import batch_sha256, row_digests
from leviathan.train.distributed import DistInfo


def step_batch_sha256(x: torch.Tensor, y: torch.Tensor, info: DistInfo) -> str | None:
    """The fingerprint of the global batch whose rows of this rank are `x` (inputs) and `y`
    (targets), on the host; every rank calls it, the main rank gets it (None elsewhere)."""
    windows = torch.cat([x, y[:, -1:]], dim=1).numpy()  # each row's context + 1 tokens
    local = row_digests(windows)
    if info.world_size == 1:
        return batch_sha256(local)
    mine = torch.frombuffer(bytearray(local), dtype=torch.uint8).to(info.device)
    parts = [torch.empty_like(mine) for _ in range(info.world_size)]
    dist.all_gather(parts, mine)
    if not info.is_main:
        return None
    return batch_sha256(b"".join(p.cpu().numpy().tobytes() for p in parts))
