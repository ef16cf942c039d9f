"""The data path's tallies: counted in plain numbers, added to Prometheus at a collection.

The reference is prometheus_client itself: the same observations given to a histogram of
the same buckets directly must read the same after a flush.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from protocol.apis import DEFAULT_REGISTRY
from proxy.datapath.metrics import _LATENCY_BUCKETS, SidecarMetrics


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() if family.name == name for s in family.samples
            if not s.name.endswith("_created")}


@given(st.lists(st.one_of(st.sampled_from(_LATENCY_BUCKETS), st.floats(0, 60, allow_nan=False)), max_size=40))
@settings(max_examples=100, deadline=None)
def test_a_flushed_histogram_tally_reads_as_prometheus_observations(values: list[float]) -> None:
    metrics = SidecarMetrics(DEFAULT_REGISTRY)
    api = metrics.for_api(0)
    reference_registry = CollectorRegistry()
    reference = Histogram("ksidecar_sidecar_latency_seconds", "x", ["api"], buckets=_LATENCY_BUCKETS,
                          registry=reference_registry).labels("Produce")
    for value in values:
        api.sidecar_latency.observe(value)
        reference.observe(value)
    # The collection flushes first (values on a bound count in that bucket, as Prometheus has it).
    assert _samples(metrics.registry, "ksidecar_sidecar_latency_seconds") == \
        _samples(reference_registry, "ksidecar_sidecar_latency_seconds")


def test_counters_are_added_at_each_collection_and_only_once() -> None:
    metrics = SidecarMetrics(DEFAULT_REGISTRY)
    api = metrics.for_api(0)
    for _ in range(3):
        api.requests(9, "forwarded").inc()
        api.request_bytes.inc(100)
    api.requests(99, "forwarded").inc()  # a version we do not parse: "other"
    read = metrics.registry.get_sample_value
    assert read("ksidecar_requests_total", {"api": "Produce", "version": "9", "outcome": "forwarded"}) == 3
    assert read("ksidecar_requests_total", {"api": "Produce", "version": "other", "outcome": "forwarded"}) == 1
    assert read("ksidecar_request_bytes_total", {"api": "Produce"}) == 300
    # Nothing counted twice by a second collection; new counts added to the old.
    assert read("ksidecar_request_bytes_total", {"api": "Produce"}) == 300
    api.request_bytes.inc(5)
    assert metrics.dirty  # counted, not yet added
    assert read("ksidecar_request_bytes_total", {"api": "Produce"}) == 305
    assert not metrics.dirty
