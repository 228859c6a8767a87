"""The documentation site builds with `mkdocs build --strict`, and a broken link or API
reference in a copy of docs/ fails that build (the check is real, not a formality).

One build of the real site is shared by the tests (a session fixture, about 5 s). Each
broken copy is one more build, of all of docs/ but with an API page of one entry (the API
pages are most of a build's time; cross-references to the rest then fail too, which the
tests tell apart from the breakage they made).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT
from tests.docs.site import Build, build, copy_sources

#: The modules docs/reference/api.md documents: each public name gets an entry.
API_MODULES = (
    "worker",
    "worker.testing",
    "backends.memory",
    "backends.sqs",
    "backends.smq",
    "worker.idempotency",
    "worker.integrations.spark",
)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build(ROOT / "mkdocs.yml", tmp_path_factory.mktemp("site") / "site")


def test_the_site_builds_with_strict(site: Build) -> None:
    assert site.returncode == 0, site.output[-4000:]
    assert "WARNING" not in site.output
    assert (site.site / "index.html").is_file()
    print(f"mkdocs build --strict: {site.seconds:.1f} s")


def test_every_public_name_has_an_entry_in_the_api_reference(site: Build) -> None:
    html = (site.site / "reference" / "api" / "index.html").read_text()
    missing = [
        f"{module}.{name}"
        for module in API_MODULES
        for name in importlib.import_module(module).__all__
        if not name.startswith("__") and f'id="{module}.{name}"' not in html
    ]
    assert missing == []


def _broken_copy(tmp_path: Path, api: str) -> Path:
    config = copy_sources(tmp_path)
    (tmp_path / "docs" / "reference" / "api.md").write_text(f"# Python API\n\n{api}\n")
    return config


def test_a_link_to_a_missing_page_and_an_unknown_cross_reference_fail(tmp_path: Path) -> None:
    config = _broken_copy(tmp_path, "::: worker.testing")
    page = tmp_path / "docs" / "reference" / "index.md"
    page.write_text(
        page.read_text()
        + "\nSee [a page that is not there](../how-to/no-such-page.md)"
        + " and [a class that is not there][worker.NoSuchThing].\n"
    )
    broken = build(config, tmp_path / "site")
    assert broken.returncode == 1
    assert "Aborted with" in broken.output and "in strict mode" in broken.output
    assert "'../how-to/no-such-page.md'" in broken.output
    assert "Could not find cross-reference target 'worker.NoSuchThing'" in broken.output


def test_an_api_entry_for_a_missing_name_fails(tmp_path: Path) -> None:
    config = _broken_copy(tmp_path, "::: worker.NoSuchThing")
    broken = build(config, tmp_path / "site")
    assert broken.returncode == 1
    assert "worker.NoSuchThing could not be found" in broken.output
