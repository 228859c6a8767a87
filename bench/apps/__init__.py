"""Processes that bench/side_by_side.py runs: lease-worker's no-op app and the floor loop."""
