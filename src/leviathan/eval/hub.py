"""Is the Hugging Face Hub reachable? Asked once, quickly, before a library retries for minutes.

`datasets` retries an unreachable Hub with back-off (about 25 s per dataset) and then fails
with a generic ConnectionError. Evaluations that need a Hub dataset call `require_hub`
first: one TCP connection to the endpoint's host with a short timeout, and a message that
says exactly what is wrong and which config key points the step at local files instead.
With HF_HUB_OFFLINE=1 nothing is probed (the local HF cache is used).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

from leviathan.eval.errors import HubUnreachable

PROBE_TIMEOUT_S = 5.0


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def offline_mode() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def probe_hub(endpoint: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if a TCP connection to the endpoint's host succeeds, else the reason."""
    url = urlparse(endpoint or hub_endpoint())
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({type(exc).__name__}: {exc})"


def require_hub(what: str, fix: str) -> None:
    """Raise HubUnreachable (saying `what` needs the Hub and how to `fix` it) if it is down."""
    if offline_mode():
        return
    reason = probe_hub()
    if reason is not None:
        raise HubUnreachable(
            f"{what} must be downloaded from the Hugging Face Hub ({hub_endpoint()}), which is "
            f"unreachable from this machine: {reason}. {fix}. (If the data is already in the "
            "local Hugging Face cache, set HF_HUB_OFFLINE=1 to use it.)"
        )


def is_connection_error(exc: BaseException) -> bool:
    """True if `exc` (or what caused it) is a failure to reach the Hub."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError) or type(seen).__name__ in {
            "OfflineModeIsEnabled",
            "LocalEntryNotFoundError",
            "ConnectError",
            "ConnectTimeout",
        }:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
