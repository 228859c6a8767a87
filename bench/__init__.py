"""Benchmarks: ratios measured side by side in one run. Never pass/fail tests."""
