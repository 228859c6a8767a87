"""Flow control's settings (issue 31): clear errors for nonsense, and a handler's own flow
control over the worker's, part by part."""

from __future__ import annotations

import pytest

from worker import Worker
from worker.config import AdaptiveConcurrency, FlowControl, RateLimit, TenantCap
from worker.errors import ConfigError


def test_flow_control_refuses_nonsense_with_clear_errors() -> None:
    with pytest.raises(ConfigError, match="per_s"):
        RateLimit(per_s=0)
    with pytest.raises(ConfigError, match="on_outage"):
        RateLimit(per_s=1, on_outage="maybe")
    with pytest.raises(ConfigError, match="shared"):
        RateLimit(per_s=1, shared="http://example.invalid")
    with pytest.raises(ConfigError, match="redacted"):
        RateLimit(per_s=1, shared="http://user:secret@example.invalid")
    with pytest.raises(ConfigError, match="per_tenant"):
        TenantCap(per_tenant=0)
    with pytest.raises(ConfigError, match="max_bytes"):
        FlowControl(max_bytes=0)
    with pytest.raises(ConfigError, match="rate"):
        FlowControl(rate=50)  # type: ignore[arg-type]
    app = Worker()
    with pytest.raises(ConfigError, match="FlowControl"):
        app.handler("jobs", flow=RateLimit(per_s=5))(lambda message: None)  # type: ignore[arg-type]


def test_a_handler_s_flow_control_overrides_the_worker_s_part_by_part() -> None:
    worker_wide = FlowControl(rate=RateLimit(per_s=5), max_bytes=100)
    own = FlowControl(max_bytes=50, adaptive=AdaptiveConcurrency())
    merged = own.over(worker_wide)
    assert merged.rate == RateLimit(per_s=5)
    assert merged.max_bytes == 50
    assert merged.adaptive == AdaptiveConcurrency()
    assert merged.tenants is None
    assert FlowControl().off and not merged.off
