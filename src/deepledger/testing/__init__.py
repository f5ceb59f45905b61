"""Test helpers for deepledger (fake LLM servers and similar utilities)."""
