"""deepledger: a deep-research agent runtime."""

__version__ = "0.1.0"
