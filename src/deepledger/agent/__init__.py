"""The agent: the turn loop (orchestrator.py), its state, rollbacks and finalization."""
