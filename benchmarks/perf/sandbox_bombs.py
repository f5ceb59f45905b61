"""How much of the host a sandbox can take: a memory bomb over 4 processes and a disk filler.

Starts the ``python`` sandbox server with ``--memory-mb 512`` (and ``--disk-mb 256`` where the
server knows it), runs the bombs through MCP and prints what the host lost: the lowest
``MemAvailable`` seen during the memory bomb against before it, and the bytes the filler
wrote. Every bomb is bounded (4 x 480 MB, 1 GiB of writes), so the host survives either way.

    .venv/bin/python benchmarks/perf/sandbox_bombs.py
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

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
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable")


async def lowest_memory(stop: asyncio.Event) -> int:
    low = mem_available_kb()
    while not stop.is_set():
        low = min(low, mem_available_kb())
        await asyncio.sleep(0.05)
    return low


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
        print(f"host MemAvailable: before {before // 1024} MB, lowest during {low // 1024} MB, "
              f"lost at most {(before - low) // 1024} MB")
        result = await client.call_tool("run_python", {"code": DISK_FILLER})
        print("disk filler result:", result.content[0].text)


if __name__ == "__main__":
    asyncio.run(main())
