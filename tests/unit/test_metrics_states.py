"""The state counters and their bounded job_type label (cluster/metrics.py), and the RPC
status a call is counted under."""

from __future__ import annotations

from prometheus_client import generate_latest

from cronwheel.cluster.metrics import OTHER_JOB_TYPE, JobTypeLabels, Metrics


def entered(m: Metrics, state: str, job_type: str) -> float:
    return m.registry.get_sample_value("cronwheel_executions_entered_total",
                                       {"state": state, "job_type": job_type}) or 0.0


def test_the_first_n_job_types_keep_their_name_and_later_ones_are_other() -> None:
    label = JobTypeLabels(cap=2)
    assert [label(t) for t in ("a", "b", "c", "a", "d", "b")] == ["a", "b", OTHER_JOB_TYPE, "a", OTHER_JOB_TYPE, "b"]


def test_job_type_series_stay_bounded_whatever_the_clients_send() -> None:
    m = Metrics(job_type_cap=3)
    for i in range(100):
        m.execution_entered("succeeded", f"type-{i}")
    types = {s.labels["job_type"] for fam in m.registry.collect() if fam.name == "cronwheel_executions_entered"
             for s in fam.samples if s.name.endswith("_total")}
    assert types == {"type-0", "type-1", "type-2", OTHER_JOB_TYPE}
    assert entered(m, "succeeded", OTHER_JOB_TYPE) == 97


def test_an_outcome_counts_the_state_entered_and_the_failure_retry_and_dead_letter_counters() -> None:
    m = Metrics()
    m.record_outcome("dead", "lease_expired", "report")
    m.record_outcome("retry_scheduled", "timeout", "report")
    m.record_outcome("succeeded", "", "report")
    assert entered(m, "dead", "report") == entered(m, "retry_scheduled", "report") == 1
    assert entered(m, "succeeded", "report") == 1
    assert m.registry.get_sample_value("cronwheel_dead_letters_total") == 1
    assert m.registry.get_sample_value("cronwheel_retries_total") == 1
    assert m.registry.get_sample_value("cronwheel_failures_total", {"type": "lease_expired"}) == 1


def test_a_fire_batch_is_counted_per_state_and_type_with_the_statements_counts_of_plain_ticks() -> None:
    m = Metrics()
    m.executions_entered([("queued", "a"), ("skipped", "a"), ("queued", "a"), ("scheduled", "b")],
                         [("queued", "a", 5), ("skipped", "c", 2)])
    assert entered(m, "queued", "a") == 7 and entered(m, "skipped", "a") == 1 and entered(m, "scheduled", "b") == 1
    assert entered(m, "skipped", "c") == 2 and entered(m, "queued", "") == 0


def test_the_node_registry_serves_process_metrics() -> None:
    page = generate_latest(Metrics().registry).decode()
    assert "process_cpu_seconds_total" in page and "process_resident_memory_bytes" in page
