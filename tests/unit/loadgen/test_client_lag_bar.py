"""workload.max_client_lag_ms: the client-lag validity bar, raised for a shared, busy controller."""

import pytest
from pydantic import ValidationError

from sweeper.spec.space import Workload
from sweeper.loadgen.lag import LagStats
from sweeper.loadgen.metrics import MAX_CLIENT_LAG_P99_MS, summarize_level
from tests.support.samples import two_requests

LAGGED = LagStats(ticks=100, median_ms=3.0, p99_ms=40.0, max_ms=90.0)


def test_the_default_bar_is_the_load_generators():
    assert Workload().max_client_lag_ms == MAX_CLIENT_LAG_P99_MS
    assert not summarize_level(two_requests(), 2, 1.0, lag=LAGGED)["valid"]


def test_a_raised_bar_keeps_a_lagged_level_valid_and_still_reports_its_lag():
    m = summarize_level(two_requests(), 2, 1.0, lag=LAGGED, max_client_lag_ms=50)
    assert m["valid"] and m["client_lag_p99_ms"] == 40.0
    [reason] = summarize_level(two_requests(), 2, 1.0, lag=LAGGED, max_client_lag_ms=20)["invalid_reasons"]
    assert reason == "client lagged: event-loop p99 lag 40.0 ms above 20 ms (max 90.0 ms)"


def test_the_bar_must_be_positive():
    with pytest.raises(ValidationError, match="max_client_lag_ms"):
        Workload(max_client_lag_ms=0)
