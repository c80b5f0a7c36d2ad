"""A before and after of the hot path: the guard's measure on several source trees at once.

``python -m bench.before_after NAME=DIR [NAME=DIR ...]`` runs the speed guard's rounds
(:mod:`bench.guard`) with a sidecar and tool server from each tree (an older commit checked
out there, ``git worktree add --detach DIR COMMIT``) beside this tree's, all in the same
rounds, and writes ``bench/results/before_after.md`` (a table) and
``docs/img/bench-before-after.png`` (a chart): each tree's sidecar and tool-server CPU per
zero-latency run, and its ratio to the in-process floor measured beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench import guard, processes

TABLE = processes.ROOT / "bench/results/before_after.md"
CHART = processes.ROOT / "docs/img/bench-before-after.png"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", metavar="NAME=DIR", help="older trees, oldest first")
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--now", default="now", help="this tree's name")
    args = parser.parse_args(argv)
    trees = {name: Path(path) for name, path in (t.split("=", 1) for t in args.trees)}
    found = guard.run(args.rounds, 50, 200, baselines=trees)
    prefixes = {**{name: f"{name}_" for name in trees}, args.now: ""}
    rows = {
        name: {
            key: statistics.median(f[p + key] for f in found)
            for key in ("sidecar_ms", "tools_ms", "floor_ms", "ratio")
        }
        for name, p in prefixes.items()
    }
    lines = [
        f"The guard's measure, {args.rounds} rounds over three sets of processes, every tree "
        "in the same rounds (medians; `python -m bench.before_after`):",
        "",
        "| tree | sidecar ms/run | tool server ms/run | together | floor beside | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['sidecar_ms']:.2f} | {row['tools_ms']:.2f} | "
            f"{row['sidecar_ms'] + row['tools_ms']:.2f} | {row['floor_ms']:.3f} | "
            f"{row['ratio']:.2f}x |"
        )
    text = "\n".join(lines)
    TABLE.write_text(text + "\n")
    print(text)
    _chart(rows)
    return 0


def _chart(rows: dict[str, dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    sidecar = [rows[n]["sidecar_ms"] for n in names]
    tools = [rows[n]["tools_ms"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(names, sidecar, label="sidecar", color="#3b6ea5")
    ax.bar(names, tools, bottom=sidecar, label="tool server", color="#9cc3e6")
    for i, name in enumerate(names):
        total = sidecar[i] + tools[i]
        ax.text(i, total + 0.03, f"{total:.2f} ms\n{rows[name]['ratio']:.2f}x floor", ha="center")
    ax.set_ylabel("CPU per zero-latency run (ms)")
    ax.set_ylim(0, max(s + t for s, t in zip(sidecar, tools, strict=True)) * 1.3)
    ax.legend(loc="upper right")
    ax.set_title("Sidecar + tool server CPU per run, measured side by side")
    fig.tight_layout()
    fig.savefig(CHART, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
