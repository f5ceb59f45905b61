"""Benchmark suites: tasks, the runner, judging, metrics, progress and multi-run reports."""
