"""Tools: MCP sessions (manager.py), the three tool-call protocols, and our own servers."""
