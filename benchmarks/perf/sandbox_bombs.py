"""How much of the host a sandbox can take: a memory bomb over 4 processes and a disk filler.

Starts the ``python`` sandbox server with ``--memory-mb 512`` (and ``--disk-mb 256`` where the
server knows it), runs the bombs through MCP and prints what the host lost: the lowest
``MemAvailable`` seen during the memory bomb against before it, and the bytes the filler
wrote. Every bomb is bounded (4 x 480 MB, 1 GiB of writes), so the host survives either way.

    .venv/bin/python benchmarks/perf/sandbox_bombs.py

Measured on the 24 GB, 2-core VM (as root, cgroup v1), other work running beside it:
before the sandbox-wide limits, the four children kept 480 MB each with no error and the
host lost 1,928 MB; the filler wrote its whole 1,024 MB into the host's temp folder.
After: three of the four were killed (the call's error says so), the cgroup's peak was
512 MB (MemAvailable fell 523-853 MB, the host's other processes included), and the
filler stopped at 245 MB with "No space left on device" in both folders.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

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


def cgroup_peak_mb() -> str:
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
                        return f"{int((group / name).read_text()) // 2**20} MB"
    return "no cgroup"


def server_args() -> list[str]:
    args = ["-m", "deepledger.tools.servers.python_sandbox", "--memory-mb", "512"]
    help_text = subprocess.run([sys.executable, *args, "--help"], capture_output=True, text=True)
    return args + (["--disk-mb", "256"] if "--disk-mb" in help_text.stdout else [])


async def main() -> None:
    params = StdioServerParameters(command=sys.executable, args=server_args())
    async with Client(params) as client:
        tools = await client.list_tools()
        print("description:", tools.tools[0].description)
        before = mem_available_kb()
        stop = asyncio.Event()
        watcher = asyncio.create_task(lowest_memory(stop))
        result = await client.call_tool("run_python", {"code": MEMORY_BOMB})
        stop.set()
        low = await watcher
        print("memory bomb result:", result.content[0].text)
        print(
            f"host MemAvailable: before {before // 1024} MB, lowest during {low // 1024} MB, "
            f"lost at most {(before - low) // 1024} MB (other processes of the host included); "
            f"the sandbox cgroup's peak: {cgroup_peak_mb()}"
        )
        result = await client.call_tool("run_python", {"code": DISK_FILLER})
        print("disk filler result:", result.content[0].text)


if __name__ == "__main__":
    asyncio.run(main())
