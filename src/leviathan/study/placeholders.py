"""A profile's template values (`<your-account>`) refused when the workflow loads.

The shipped SLURM profile holds `<your-...>` placeholders for the user's account and partition.
`sbatch` would refuse them, but only after the dry run planned the study and the real run
submitted its first job. So the Snakefile refuses them as it loads, from what Snakemake holds
at that moment: the default-resources (profile or command line, as `name=value` strings) and
the set-resources (per rule). Which executor will run is not known yet when the Snakefile is
read, so the check does not ask: a `<...>` value is one no executor can use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

PLACEHOLDER = re.compile(r"<[A-Za-z][\w-]*>")  # `<your-account>`, also inside slurm_extra


def placeholders(default_args: Iterable[str], set_resources: Mapping[str, Any]) -> list[str]:
    """`name=value` (default-resources) and `rule:name=value` (set-resources) of every value
    that still holds a `<placeholder>`. `set_resources` maps a rule to its resources, each a
    plain value or one with the `raw` value Snakemake parsed it from."""
    found = []
    for arg in default_args:
        name, sep, value = str(arg).partition("=")
        if sep and PLACEHOLDER.search(value):
            found.append(f"{name.strip()}={value.strip()}")
    for rule, resources in set_resources.items():
        for name, resource in (resources or {}).items():
            value = getattr(resource, "raw", resource)
            if isinstance(value, str) and PLACEHOLDER.search(value):
                found.append(f"{rule}:{name}={value}")
    return found


def placeholder_error(resource_settings: Any) -> str | None:
    """The one-line refusal of a profile whose resources still hold placeholders (Snakemake's
    `workflow.resource_settings`), or None."""
    defaults = getattr(resource_settings, "default_resources", None)
    found = placeholders(
        getattr(defaults, "args", None) or (),
        getattr(resource_settings, "overwrite_resources", None) or {},
    )
    if not found:
        return None
    return (
        f"the profile's resources still hold the template's placeholders ({', '.join(found)}): "
        "set your SLURM account and partition in the profile's config.yaml, or give them with "
        "--default-resources (docs/slurm.md)"
    )
