"""deepledger's own MCP tool servers, each runnable as python -m deepledger.tools.servers.<name>."""
