"""Tools: MCP sessions (manager.py), the two tool-call protocols, and our own servers."""
