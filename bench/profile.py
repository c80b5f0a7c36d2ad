"""Where a run's CPU goes: py-spy on the sidecar and its tool server under zero-latency load.

``python -m bench.profile`` (``make profile``) starts the zero-latency LLM simulator, the
example shop tool server and a sidecar in its default configuration, drives turns of the
benchmark workload at ``--concurrency`` for ``--seconds``, and samples both servers with
``py-spy record`` (native frames included, idle threads left out). It writes each
process's collapsed stacks under ``bench/results/profile/`` (``*.txt``: the input of flame
graph tools such as ``inferno-flamegraph`` or speedscope), and prints each process's top
functions by own samples and by samples under them, and the samples summed by the part of a
run that asked for the work (:func:`category`). Before sampling it measures each process's
CPU per run over a batch of runs: the share of each part times that is the CPU ledger
(``bench/results/ledger.md``, quoted in ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import processes
from bench.workload import ZERO
from sidecar.testing import ServerProcess

OUT = processes.ROOT / "bench/results/profile"
LEDGER = processes.ROOT / "bench/results/ledger.md"
LEDGER_CHART = processes.ROOT / "docs/img/bench-ledger.png"

# A sample belongs to the part of a run that asked for the work: the innermost frame of
# the product's own code names it (asyncio, aiohttp or gRPC work called from the model
# transport is the model request's); samples with no such frame (the event loop and gRPC's
# completion callbacks, in C) are named by their innermost library. Ordered: first match.
_PARTS = (
    ("tool calls (sidecar side)", ("sidecar/tools/",)),
    ("model requests", ("sidecar/llm/",)),
    ("session store", ("sidecar/sessions/",)),
    ("context window", ("sidecar/context/",)),
    ("telemetry and audit", ("sidecar/telemetry/", "sidecar/security/audit", "redaction")),
    ("protobuf conversion", ("sidecar/api/convert.py", "sidecar/api/stream.py")),
    ("the caller's RPC", ("sidecar/api/",)),
    ("the loop and the run", ("sidecar/agent/", "sidecar/security/", "sidecar/schemas")),
)
# The tool server's own parts: its protocol, the SDK's work around a handler, the tools.
_TOOL_SERVER_PARTS = (
    ("the tools themselves", ("toolservers/examples/",)),
    ("arguments validated (pydantic)", ("pydantic",)),
    ("the SDK around a handler", ("toolservers/_runner.py", "toolservers/_context.py")),
    ("the SDK's protocol", ("toolservers/_service.py",)),
)
_LIBRARIES = (
    ("gRPC core and its callbacks", ("grpc/", "cygrpc", "_cython")),
    ("aiohttp (unattributed)", ("aiohttp/", "multidict", "yarl/")),
    ("event loop (uvloop, asyncio)", ("asyncio/", "uvloop", "loop.c", "_asynciomodule")),
)
_UNATTRIBUTED = "other (interpreter, kernel)"


# Leaf frames of a thread that waits: py-spy's idle detection does not see through native
# frames, so these samples are dropped by name (the CPU is elsewhere).
_WAITING = (
    "epoll_wait", "epoll_pwait", "poll (", "select (", "pthread_cond_", "sem_wait",
    "sem_clockwait", "nanosleep", "syscall (", "_queue_SimpleQueue_get", "accept",
    "__futex", "futex", "PyThread_acquire_lock_timed", "_queue_SimpleQueue_get",
)  # fmt: skip


def waiting(stack: str) -> bool:
    """Whether a collapsed stack is a thread blocked in the kernel, not on the CPU."""
    # A lock wait ends in an anonymous libc frame or two below the named one.
    return any(frame.startswith(_WAITING) for frame in stack.rsplit(";", 4)[1:])


def category(stack: str, parts: tuple[tuple[str, tuple[str, ...]], ...] = _PARTS) -> str:
    """The ledger part of one collapsed stack (frames outermost first, ``;``-joined)."""
    frames = stack.split(";")
    for frame in reversed(frames):
        for name, patterns in parts:
            if any(p in frame for p in patterns):
                return name
    for frame in reversed(frames):
        for name, patterns in _LIBRARIES:
            if any(p in frame for p in patterns):
                return name
    return _UNATTRIBUTED


def _drive(target: str, concurrency: int, stop: threading.Event) -> None:
    worker = processes.Worker("sidecar")
    command = {"mode": ZERO.name, "target": target, "concurrency": concurrency}
    try:
        while not stop.is_set():
            worker.command(op="prepare", runs=100, **command)  # the sessions the runs use
            worker.command(op="batch", runs=100, **command)
    finally:
        worker.stop()


def _cpu_per_run(
    sidecar: ServerProcess, tools: ServerProcess, concurrency: int, runs: int
) -> dict[str, float]:
    """Each process's CPU per run over ``runs`` turns (after as many to warm up), unsampled."""
    worker = processes.Worker("sidecar")
    command = {"mode": ZERO.name, "target": sidecar.address, "concurrency": concurrency}
    try:
        worker.command(op="prepare", runs=runs, **command)
        worker.command(op="batch", runs=runs, **command)
        worker.command(op="prepare", runs=runs, **command)
        before = sidecar.cpu_seconds(), tools.cpu_seconds()
        worker.command(op="batch", runs=runs, **command)
        after = sidecar.cpu_seconds(), tools.cpu_seconds()
    finally:
        worker.stop()
    return {
        "sidecar": (after[0] - before[0]) / runs * 1000,
        "tool-server": (after[1] - before[1]) / runs * 1000,
    }


def _report(
    name: str, collapsed: Path, top: int, parts: tuple[tuple[str, tuple[str, ...]], ...]
) -> dict[str, float]:
    """Print a process's parts and top functions; return each part's share."""
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    categories: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if waiting(stack):
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        for frame in set(frames):
            under[frame] += samples
        categories[category(stack, parts)] += samples
    print(f"\n## {name}: {total} samples on the CPU")
    print("\n| share | category |\n| ---: | --- |")
    for cat, samples in categories.most_common():
        print(f"| {samples / total:.1%} | {cat} |")
    print("\n| own | function |\n| ---: | --- |")
    for frame, samples in own.most_common(top):
        print(f"| {samples / total:.1%} | `{frame}` |")
    print("\n| under | function |\n| ---: | --- |")
    for frame, samples in under.most_common(top * 2):
        print(f"| {samples / total:.1%} | `{frame}` |")
    return {cat: samples / total for cat, samples in categories.items()}


def ledger(shares: dict[str, dict[str, float]], cpu_ms: dict[str, float], concurrency: int) -> str:
    """The CPU ledger: each part's milliseconds of CPU per run (its share of the samples
    times the process's CPU per run, measured unsampled)."""
    lines = [
        f"CPU per run at zero latency, concurrency {concurrency}: each process's CPU per run "
        "(measured over a batch of runs, unsampled) split by the share of py-spy's samples "
        "that each part of the run asked for (`make profile`).",
        "",
        "![the CPU ledger](img/bench-ledger.png)",
        "",
        "| process | part | ms per run | share |",
        "| --- | --- | ---: | ---: |",
    ]
    for process, parts in shares.items():
        for part, share in sorted(parts.items(), key=lambda item: -item[1]):
            lines.append(f"| {process} | {part} | {share * cpu_ms[process]:.3f} | {share:.1%} |")
        lines.append(f"| {process} | **all** | **{cpu_ms[process]:.3f}** | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0, help="of sampling")
    parser.add_argument("--runs", type=int, default=1000, help="runs measured unsampled")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=25, help="functions listed per process")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        sim = processes.simulator()
        tools = processes.shop(ZERO.tool_ms)
        sidecar = processes.sidecar(sim, [("shop", tools)], Path(tmp))
        stop = threading.Event()
        driver = threading.Thread(target=_drive, args=(sidecar.address, args.concurrency, stop))
        try:
            cpu_ms = _cpu_per_run(sidecar, tools, args.concurrency, args.runs)
            driver.start()
            recorders = {}
            for name, server in (("sidecar", sidecar), ("tool-server", tools)):
                recorders[name] = subprocess.Popen(
                    [
                        py_spy, "record", "--pid", str(server.pid), "--native",
                        "--rate", str(args.rate), "--duration", str(int(args.seconds)),
                        "--format", "raw", "--output", str(OUT / f"{name}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            for recorder in recorders.values():
                recorder.wait()
        finally:
            stop.set()
            if driver.is_alive():
                driver.join()
            sidecar.stop()
            tools.stop()
            sim.stop()
    print(f"# profile: zero latency, concurrency {args.concurrency}, {args.seconds:g} s")
    shares = {
        "sidecar": _report("sidecar", OUT / "sidecar.txt", args.top, _PARTS),
        "tool-server": _report(
            "tool-server", OUT / "tool-server.txt", args.top, _TOOL_SERVER_PARTS
        ),
    }
    table = ledger(shares, cpu_ms, args.concurrency)
    # bench.peers quotes it in docs/benchmarks.md.
    LEDGER.write_text(table + "\n")
    LEDGER.with_suffix(".json").write_text(
        json.dumps({"cpu_ms": cpu_ms, "shares": shares}, indent=1) + "\n"
    )
    chart(shares, cpu_ms)
    print(f"\n{table}\n\ncollapsed stacks: {OUT.relative_to(processes.ROOT)}/")
    return 0


def chart(shares: dict[str, dict[str, float]], cpu_ms: dict[str, float]) -> None:
    """The ledger as a chart (``docs/img/bench-ledger.png``): each part's ms per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        (f"{part} ({process})", share * cpu_ms[process])
        for process, parts in shares.items()
        for part, share in parts.items()
        if share * cpu_ms[process] >= 0.005
    ]
    rows.sort(key=lambda row: row[1])
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    colors = ["#9cc3e6" if "(tool-server)" in label else "#3b6ea5" for label, _ in rows]
    ax.barh([label for label, _ in rows], [ms for _, ms in rows], color=colors)
    for i, (_, ms) in enumerate(rows):
        ax.text(ms + 0.005, i, f"{ms:.3f}", va="center", fontsize=8)
    ax.set_xlabel("CPU per zero-latency run (ms)")
    ax.set_title(
        f"CPU ledger: sidecar {cpu_ms['sidecar']:.2f} + tool server "
        f"{cpu_ms['tool-server']:.2f} ms per run",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(LEDGER_CHART, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
