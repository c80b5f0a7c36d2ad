"""Where a run's CPU goes: py-spy on the sidecar and its tool server under zero-latency load.

``python -m bench.profile`` (``make profile``) starts the zero-latency LLM simulator, the
example shop tool server and a sidecar in its default configuration, drives turns of the
benchmark workload at ``--concurrency`` for ``--seconds``, and samples both servers with
``py-spy record`` (native frames included, idle threads left out). It writes each
process's collapsed stacks under ``bench/results/profile/`` (``*.txt``: the input of flame
graph tools such as ``inferno-flamegraph`` or speedscope), and prints each process's top
functions by own samples and by samples under them, and the samples summed by the part of a
run that asked for the work (:func:`category`): the shares of the CPU ledger.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import processes
from bench.workload import ZERO

OUT = processes.ROOT / "bench/results/profile"

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


def _drive(target: str, concurrency: int, seconds: float, stop: threading.Event) -> int:
    worker = processes.Worker("sidecar")
    command = {"mode": ZERO.name, "target": target, "concurrency": concurrency}
    runs = 0
    try:
        worker.command(op="prepare", runs=200, **command)
        worker.command(op="batch", runs=200, **command)
        while not stop.is_set():
            worker.command(op="batch", runs=100, **command)
            runs += 100
    finally:
        worker.stop()
    return runs


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
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
        runs: list[int] = []
        driver = threading.Thread(
            target=lambda: runs.append(
                _drive(sidecar.address, args.concurrency, args.seconds, stop)
            )
        )
        try:
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
            driver.join()
            sidecar.stop()
            tools.stop()
            sim.stop()
    print(f"# profile: zero latency, concurrency {args.concurrency}, {args.seconds:g} s")
    _report("sidecar", OUT / "sidecar.txt", args.top, _PARTS)
    _report("tool-server", OUT / "tool-server.txt", args.top, _TOOL_SERVER_PARTS)
    print(f"\ncollapsed stacks: {OUT.relative_to(processes.ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
