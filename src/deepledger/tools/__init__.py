"""Tools: what the agent calls, by lifetime.

The MCP SDK's import (sdk.py, once per process), one MCP session (session.py), a run's
pool of sessions (pool.py), one agent's tools in one task (task_tools.py), the types
they share (types.py), the tool-call protocols (protocols/), and our own servers.
"""
