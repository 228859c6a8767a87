"""The peers of bench/side_by_side.py: their drivers, pinned installs and settings."""
