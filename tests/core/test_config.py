"""Settings whose defaults follow each other, and the checks against a backend's `Limits`."""

from __future__ import annotations

import dataclasses

import pytest

from backends.memory.dialects import SQS_DIALECT
from worker import ConfigError, LeaseConfig, WorkerConfig
from worker.core.preflight import check_config

SQS_LIMITS = SQS_DIALECT.limits
#: A backend whose long polls, like SMQ's, last up to 30 s.
LONG_POLL_LIMITS = dataclasses.replace(SQS_LIMITS, max_wait_s=30)

# -- defaults worked out from the visibility -------------------------------------------------


def test_visibility_6_alone_is_not_refused_by_the_default_margin() -> None:
    # Defect: `--visibility-s 6` alone failed, as the fixed 10 s margin was not shorter.
    config = LeaseConfig(visibility_s=6)
    assert (config.extension_s, config.renew_margin_s) == (6, 2.0)
    assert config.effective_renew_timeout_s == pytest.approx(2 / 3)


def test_the_cli_s_replace_of_the_visibility_works_the_defaults_out_again() -> None:
    # The CLI applies `--visibility-s` with `dataclasses.replace` on the app's config.
    config = dataclasses.replace(LeaseConfig(), visibility_s=6)
    assert (config.visibility_s, config.extension_s, config.renew_margin_s) == (6, 6, 2.0)
    longer = dataclasses.replace(config, visibility_s=120)
    assert (longer.extension_s, longer.renew_margin_s) == (120, 10.0)


def test_given_values_survive_a_replace() -> None:
    config = LeaseConfig(visibility_s=30, extension_s=20, renew_margin_s=4)
    moved = dataclasses.replace(config, visibility_s=60)
    assert (moved.extension_s, moved.renew_margin_s) == (20, 4)
    # A given extension changes the worked-out margin, which follows the shorter visibility.
    assert dataclasses.replace(LeaseConfig(visibility_s=60), extension_s=15).renew_margin_s == 5


def test_the_defaults_for_a_30_s_visibility_are_unchanged() -> None:
    config = LeaseConfig()
    assert (config.visibility_s, config.extension_s, config.renew_margin_s) == (30, 30, 10)
    assert config.effective_renew_timeout_s == pytest.approx(10 / 3)
    assert config == LeaseConfig(extension_s=None, renew_margin_s=None)
    assert config == LeaseConfig(visibility_s=30, extension_s=30, renew_margin_s=10)


@pytest.mark.parametrize(
    ("visibility_s", "extension_s", "margin_s"),
    [(1, None, 1 / 3), (6, None, 2.0), (30, None, 10.0), (600, None, 10.0), (60, 15, 5.0)],
)
def test_the_margin_is_a_third_of_the_shorter_visibility_at_most_10_s(
    visibility_s: int, extension_s: int | None, margin_s: float
) -> None:
    config = LeaseConfig(visibility_s=visibility_s, extension_s=extension_s)
    assert config.renew_margin_s == pytest.approx(margin_s)


def test_a_given_margin_is_still_checked_against_the_visibility() -> None:
    with pytest.raises(ConfigError, match=r"renew_margin_s=6: .*visibility_s \(6 s\)"):
        LeaseConfig(visibility_s=6, renew_margin_s=6)
    with pytest.raises(ConfigError, match=r"renew_margin_s=8: .*extension_s \(8 s\)"):
        LeaseConfig(visibility_s=30, extension_s=8, renew_margin_s=8)


def test_a_renewal_timeout_not_shorter_than_the_margin_is_refused() -> None:
    # Defect: a renewal abandoned at its timeout left no time before the deadline to retry.
    with pytest.raises(ConfigError, match=r"renew_timeout_s=3: .*renew_margin_s \(3 s\)"):
        LeaseConfig(renew_margin_s=3, renew_timeout_s=3)
    assert LeaseConfig(renew_margin_s=3, renew_timeout_s=2.9).effective_renew_timeout_s == 2.9


# -- checks against the backend's limits ----------------------------------------------------


def test_a_30_s_wait_is_for_the_backend_to_refuse_not_the_config() -> None:
    # Defect: WorkerConfig refused wait_s > 20 (SQS's limit) whatever the backend.
    config = WorkerConfig(wait_s=30)
    check_config(config, LONG_POLL_LIMITS)
    with pytest.raises(
        ConfigError, match="wait_s=30: must be at most 20, the backend's max_wait_s"
    ):
        check_config(config, SQS_LIMITS)


def test_defaults_fit_both_backends() -> None:
    check_config(WorkerConfig(), SQS_LIMITS)
    check_config(WorkerConfig(), LONG_POLL_LIMITS)


#: A backend with shorter limits than SQS's.
SHORT = dataclasses.replace(SQS_LIMITS, max_visibility_s=600, max_lease_s=1200)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"visibility_s": 601}, "visibility_s=601: must be at most 600"),
        ({"visibility_s": 60, "extension_s": 900}, "extension_s=900: must be at most 600"),
        ({"max_lease_s": 1200.5}, "max_lease_s=1200.5: must be at most 1200"),
        ({"adaptive": True, "adaptive_max_s": 601}, "adaptive_max_s=601: must be at most 600"),
    ],
)
def test_lease_settings_over_the_backend_s_limits_are_refused(
    settings: dict[str, object], fragment: str
) -> None:
    # Every other setting within SHORT's limits.
    lease = LeaseConfig(**{"max_lease_s": 1200.0, **settings})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=fragment):
        check_config(WorkerConfig(lease=lease), SHORT)


def test_the_adaptive_maximum_counts_only_when_adaptive() -> None:
    check_config(WorkerConfig(lease=LeaseConfig(adaptive_max_s=601, max_lease_s=1200)), SHORT)
