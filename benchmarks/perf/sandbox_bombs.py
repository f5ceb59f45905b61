"""How much of the host a sandbox can take: a memory bomb over 4 processes and a disk filler.

Starts the ``python`` sandbox server with ``--memory-mb 512`` (and ``--disk-mb 256`` where the
server knows it), runs the bombs through MCP and prints what the host lost: the lowest
``MemAvailable`` seen during the memory bomb against before it, and the bytes the filler
wrote. Every bomb is bounded (4 x 480 MB, 1 GiB of writes), so the host survives either way.

    .venv/bin/python benchmarks/perf/sandbox_bombs.py [--label after] [--out FILE]

The figures also go, under the label, into ``benchmarks/perf/results/sandbox_bombs.json``
(other labels there are kept).

Measured on the 24 GB, 2-core VM (as root, cgroup v1), other work running beside it:
before the sandbox-wide limits, the four children kept 480 MB each with no error and the
host lost 1,928 MB; the filler wrote its whole 1,024 MB into the host's temp folder.
After: three of the four were killed (the call's error says so), the cgroup's peak was
512 MB (MemAvailable fell 523-853 MB, the host's other processes included), and the
filler stopped at 245 MB with "No space left on device" in both folders.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox_bombs.json"

MEMORY_BOMB = """
import subprocess, sys
child = '''
chunks = []
for _ in range(48):  # 48 x 10 MB, touched: under each process's own 512 MB limit
    chunks.append(bytearray(10 * 2**20))
import time; time.sleep(2)
print('child kept', len(chunks) * 10, 'MB')
'''
procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]
print([p.wait() for p in procs])
"""

DISK_FILLER = """
import os
written = 0
block = b'x' * 2**20
for folder in ('.', '/tmp'):
    try:
        with open(os.path.join(folder, 'filler.bin'), 'wb') as out:
            for _ in range(512):  # at most 512 MB per folder
                out.write(block)
                written += len(block)
    except OSError as exc:
        print(folder, type(exc).__name__, exc)
print('written MB', written // 2**20)
"""


def mem_available_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable")


async def lowest_memory(stop: asyncio.Event) -> int:
    low = mem_available_kb()
    while not stop.is_set():
        low = min(low, mem_available_kb())
        await asyncio.sleep(0.05)
    return low


def cgroup_peak_mb() -> int | None:
    """The kernel's peak for the sandbox's memory cgroup (this process's server), if any."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent != os.getpid():
            continue
        pid = stat.parent.name
        for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
            for group in Path(root, "deepledger-sandboxes").glob(f"{pid}-*"):
                for name in ("memory.max_usage_in_bytes", "memory.peak"):
                    if (group / name).exists():
                        return int((group / name).read_text()) // 2**20
    return None


def server_args() -> list[str]:
    args = ["-m", "deepledger.tools.servers.python_sandbox", "--memory-mb", "512"]
    help_text = subprocess.run([sys.executable, *args, "--help"], capture_output=True, text=True)
    return args + (["--disk-mb", "256"] if "--disk-mb" in help_text.stdout else [])


async def measure() -> dict[str, object]:
    """Runs both bombs; what the host lost and what the sandbox said, as printed."""
    params = StdioServerParameters(command=sys.executable, args=server_args())
    async with Client(params) as client:
        tools = await client.list_tools()
        description = tools.tools[0].description or ""
        print("description:", description)
        before = mem_available_kb()
        stop = asyncio.Event()
        watcher = asyncio.create_task(lowest_memory(stop))
        result = await client.call_tool("run_python", {"code": MEMORY_BOMB})
        stop.set()
        low = await watcher
        memory_text = result.content[0].text  # type: ignore[union-attr]
        peak = cgroup_peak_mb()
        print("memory bomb result:", memory_text)
        print(
            f"host MemAvailable: before {before // 1024} MB, lowest during {low // 1024} MB, "
            f"lost at most {(before - low) // 1024} MB (other processes of the host included); "
            f"the sandbox cgroup's peak: {'no cgroup' if peak is None else f'{peak} MB'}"
        )
        result = await client.call_tool("run_python", {"code": DISK_FILLER})
        filler_text = result.content[0].text  # type: ignore[union-attr]
        print("disk filler result:", filler_text)
    written = re.search(r"written MB (\d+)", filler_text)
    return {
        "description": description,
        "memory_bomb_result": memory_text,
        "mem_available_before_mb": before // 1024,
        "mem_available_lowest_mb": low // 1024,
        "host_lost_at_most_mb": (before - low) // 1024,
        "cgroup_peak_mb": peak,
        "disk_filler_result": filler_text,
        "disk_filler_written_mb": int(written.group(1)) if written else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--label", default="after", help="this run's entry in the results")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    measured = asyncio.run(measure())
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results["what"] = (
        "the python sandbox server at --memory-mb 512 (--disk-mb 256): a memory bomb of 4 "
        "processes x 480 MB and a disk filler of up to 2 x 512 MB; host MemAvailable "
        "before and lowest during the memory bomb, the sandbox cgroup's peak"
    )
    results[args.label] = {
        "measured_at": started.isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "euid": os.geteuid(),
        **measured,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
