"""Generators of the reference pages under docs/reference/ (not shipped in the wheel).

`python -m docs.gen` rewrites the generated pages; `python -m docs.gen --check` says which
are stale (tests/docs/test_reference_pages.py runs that check).
"""
