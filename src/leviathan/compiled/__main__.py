"""python -m leviathan.compiled [--json]: the compile-level report of the kernels."""

from __future__ import annotations

import argparse
import json

from leviathan.compiled.report import report


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m leviathan.compiled", description=__doc__)
    parser.add_argument("--json", action="store_true", help="the whole report as JSON")
    result = report()
    if parser.parse_args().json:
        print(json.dumps(result))
        return
    print(f"Triton {result['triton']}, resources at {result['reference_shape']}")
    print(
        f"{'arch':6} {'kernel':14} {'regs':>4} {'spill':>5} {'shared':>7} {'warps':>5} "
        f"{'loop':>5} {'bar':>4} {'mma':>4} atomics"
    )
    for arch, kernels in result["usage"].items():
        for name, u in kernels.items():
            loop = u["hot_loop"]
            print(
                f"{arch:6} {name:14} {u['registers']:4} {u['spill_bytes']:5} "
                f"{u['shared_bytes']:7} {u['warps']:5} {loop['instructions']:5} "
                f"{loop['barriers']:4} {loop['mma']:4} {u['atomics']:7} "
                + (f"{u['sass_per_factor']:.1f} per factor" if "sass_per_factor" in u else "")
            )
    bad = [a for a in result["addresses"] if a["problems"]]
    widest = max(a["largest_i32_offset"] for a in result["addresses"])
    print(
        f"{len(result['addresses'])} kernel launches at planned shapes: {len(bad)} with a "
        f"32-bit address problem; largest 32-bit offset {widest:,} (limit 2^31 - 1)"
    )
    for a in bad:
        print(f"  {a['shape']}: {'; '.join(a['problems'])}")


if __name__ == "__main__":
    main()
