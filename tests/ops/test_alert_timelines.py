"""The alert rules against failure timelines, as promtool unit tests: what Prometheus would
have scraped through each failure (tests/ops/timelines.py writes the samples), and which
alerts fire when. At every check, every alert is stated: those named fire with exactly
those labels and annotations (`namespace` always among them), every other one is quiet.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops import timelines as tl
from tests.ops.test_alert_rules import RULES, expand, rules
from tests.ops.timelines import Clock, Pod, State

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed"
)

MIN = 60
HOUR = 60 * MIN
DAY = 24 * HOUR
NAMESPACE, JOB = "orders", "orders/lease-worker"
JOBS = 'queue="jobs"'

#: Each alert's labels (beside its rule's severity) in these timelines.
DOWN = {"namespace": NAMESPACE}
BACKLOG = {"namespace": NAMESPACE, "scaledObject": "lease-worker"}
ON_QUEUE = {"namespace": NAMESPACE, "job": JOB, "queue": "jobs"}
DLQ = {**ON_QUEUE, "dead_letter_queue": "jobs-dlq"}


def crash_looping(pod: Pod) -> dict[str, str]:
    return {"namespace": NAMESPACE, "pod": pod.name, "container": "worker"}


#: Alert name -> the labels of each of its alerts firing.
Firing = dict[str, list[dict[str, str]]]


@dataclass(frozen=True)
class Timeline:
    clock: Clock
    series: dict[str, State]
    #: Seconds from the start -> the alerts firing then; every other alert quiet.
    checks: dict[int, Firing]
    evaluation_s: int = 15


def worker(pod: Pod, extra: str = "") -> str:
    """The labels a PodMonitor's scrape gives a worker pod's series."""
    labels = f'namespace="{NAMESPACE}",job="{JOB}",pod="{pod.name}",instance="{pod.instance}"'
    return labels + (f",{extra}" if extra else "")


def kube_state(pod: Pod) -> dict[str, State]:
    """What kube-state-metrics shows of a pod's worker container."""
    labels = f'namespace="{NAMESPACE}",job="kube-state-metrics",pod="{pod.name}",container="worker"'
    restarts: State = lambda t: (  # noqa: E731
        float(sum(run.start_s <= t for run in pod.runs) - 1) if pod.exists(t) else None
    )
    return {
        f"kube_pod_container_status_restarts_total{{{labels}}}": restarts,
        "kube_pod_container_status_waiting_reason"
        f'{{{labels},reason="CrashLoopBackOff"}}': pod.backing_off,
    }


def scaled_object(min_replicas: State, replicas: State) -> dict[str, State]:
    """kube-state-metrics' view of KEDA's HPA (min: the ScaledObject's minReplicaCount, at
    least 1) and of the Deployment (the replicas KEDA or its HPA set)."""
    ksm = f'namespace="{NAMESPACE}",job="kube-state-metrics"'
    return {
        "kube_horizontalpodautoscaler_spec_min_replicas"
        f'{{{ksm},horizontalpodautoscaler="keda-hpa-lease-worker"}}': min_replicas,
        f'kube_deployment_spec_replicas{{{ksm},deployment="lease-worker"}}': replicas,
    }


def keda(active: State, messages: State) -> dict[str, State]:
    """KEDA operator's metrics, scraped without honorLabels."""
    labels = (
        f'exported_namespace="{NAMESPACE}",namespace="keda",job="keda-operator",'
        'scaledObject="lease-worker",scaler="awsSqsQueueScaler",metric="s0-aws-sqs-queue"'
    )
    return {
        f"keda_scaler_active{{{labels}}}": active,
        f"keda_scaler_metrics_value{{{labels}}}": messages,
    }


def pods_up(*pods: Pod) -> dict[str, State]:
    series: dict[str, State] = {}
    for pod in pods:
        series[f"up{{{worker(pod)}}}"] = pod.up
        series.update(kube_state(pod))
    return series


def loop_onset(pod: Pod, clock: Clock) -> dict[int, Firing]:
    """The checks around when a crash loop starts to alert: CrashLooping once the third
    start is scraped (two restarts, back-off seen), Down 5 minutes after the first sample
    in back-off (the pod not up since: its `up` reads 0 from then on)."""
    crash_s = next(t for t in clock.times() if t >= pod.runs[2].start_s)
    down_s = next(t for t in clock.times() if pod.backing_off(t)) + 5 * MIN
    assert crash_s < down_s
    looping = {"LeaseWorkerCrashLooping": [crash_looping(pod)]}
    return {
        crash_s - clock.step_s: {},
        crash_s: looping,
        down_s - clock.step_s: looping,
        down_s: {**looping, "LeaseWorkerDown": [DOWN]},
    }


def every(start_s: int, end_s: int, step_s: int, firing: Firing) -> dict[int, Firing]:
    return {t: firing for t in range(start_s, end_s + 1, step_s)}


# --- The timelines ---------------------------------------------------------------------


def crash_loop_for_an_hour() -> Timeline:
    """Killed 100 s into each start (OOMKilled under load), at the kubelet's back-off, for
    an hour; then a start that stays up. Both alerts fire for as long as it lasts."""
    pod = tl.looping("lease-worker-5d8f-x2x9q", "10.0.1.7:9100", 0, [100], until_s=HOUR)
    recovered_s = int(pod.runs[-1].start_s)
    both = {"LeaseWorkerCrashLooping": [crash_looping(pod)], "LeaseWorkerDown": [DOWN]}
    clock = Clock(15, 80 * MIN)
    return Timeline(
        clock,
        {**pods_up(pod), **scaled_object(tl.constant(1), tl.constant(1))},
        {
            **loop_onset(pod, clock),
            **every(10 * MIN, HOUR, 5 * MIN, both),
            # Up for 3 minutes straight: Down resolves; back-off within 10 minutes: still looping.
            recovered_s + 4 * MIN: {"LeaseWorkerCrashLooping": [crash_looping(pod)]},
            recovered_s + 11 * MIN: {},
        },
    )


def start_ups_that_fail() -> Timeline:
    """Each start fails after 30-90 s (an unreachable endpoint, a refused credential): the
    pod answers scrapes, not ready, while it tries. For an hour, then the cause is fixed."""
    pod = tl.looping("lease-worker-5d8f-x2x9q", "10.0.1.7:9100", 0, [37, 62, 90, 30, 75], HOUR)
    recovered_s = int(pod.runs[-1].start_s)
    both = {"LeaseWorkerCrashLooping": [crash_looping(pod)], "LeaseWorkerDown": [DOWN]}
    ready = tl.steps((0, 0), (recovered_s + 20, 1))
    clock = Clock(15, 80 * MIN)
    return Timeline(
        clock,
        {
            **pods_up(pod),
            f"lease_worker_ready{{{worker(pod)}}}": pod.while_running(ready),
            **scaled_object(tl.constant(1), tl.constant(1)),
        },
        {
            **loop_onset(pod, clock),
            **every(10 * MIN, HOUR, 5 * MIN, both),
            recovered_s + 4 * MIN: {"LeaseWorkerCrashLooping": [crash_looping(pod)]},
            recovered_s + 11 * MIN: {},
        },
    )


def pods_replaced() -> Timeline:
    """minReplicaCount 2. A rollout replaces both pods (a new one first, maxSurge 1); then
    a node drain evicts one, and its replacement cannot start (fails after 45 s, again and
    again): one pod of the two left."""
    old = [tl.steady("lease-worker-5d8f-a", "10.0.1.1:9100", 0, 6 * MIN)]
    old.append(tl.steady("lease-worker-5d8f-b", "10.0.1.2:9100", 0, 7 * MIN))
    evicted = tl.steady("lease-worker-7c4d-c", "10.0.1.3:9100", 5 * MIN, 20 * MIN)
    kept = tl.steady("lease-worker-7c4d-d", "10.0.1.4:9100", 6 * MIN)
    failing = tl.looping("lease-worker-7c4d-e", "10.0.2.5:9100", 20 * MIN, [45], 2 * HOUR)
    degraded = {"LeaseWorkerCrashLooping": [crash_looping(failing)], "LeaseWorkerDown": [DOWN]}
    clock = Clock(15, 45 * MIN)
    return Timeline(
        clock,
        {
            **pods_up(*old, evicted, kept, failing),
            **scaled_object(tl.constant(2), tl.constant(2)),
        },
        {
            # The rollout: 3 pods up, then 2 (a new one each time before an old one goes).
            **{t: {} for t in (4 * MIN, 330, 390, 450, 10 * MIN, 15 * MIN, 20 * MIN)},
            # One pod left of the two from the replacement's first failure (Down), and the
            # replacement crash-looping.
            **loop_onset(failing, clock),
            **every(27 * MIN, 45 * MIN, 3 * MIN, degraded),
        },
    )


def keda_at_zero_over_a_weekend() -> Timeline:
    """minReplicaCount 0: the queue idle from Friday evening, KEDA scales the workers to
    zero; two days later messages arrive, KEDA asks for a pod, and it stays Pending (no
    node fits it): nothing is scraped of it at all."""
    monday = 2 * DAY + 30 * MIN
    pod = tl.steady("lease-worker-5d8f-x2x9q", "10.0.1.7:9100", 0, 35 * MIN)
    busy = tl.steps((0, 1), (30 * MIN, 0), (monday, 1))
    work = pod.while_running(tl.rising(2, until_s=30 * MIN))
    return Timeline(
        Clock(60, monday + HOUR),
        {
            **pods_up(pod),
            f"lease_worker_messages_received_total{{{worker(pod, JOBS)}}}": work,
            f'lease_worker_messages_handled_total{{{worker(pod, JOBS)},outcome="succeeded"}}': work,
            **scaled_object(tl.constant(1), tl.steps((0, 1), (35 * MIN, 0), (monday, 1))),
            **keda(busy, tl.steps((0, 20), (30 * MIN, 0), (monday, 20))),
        },
        {
            **{t: {} for t in (20 * MIN, 40 * MIN, DAY, 2 * DAY, monday + 3 * MIN)},
            monday + 10 * MIN: {"LeaseWorkerDown": [DOWN]},
            monday + 20 * MIN: {
                "LeaseWorkerDown": [DOWN],
                "LeaseWorkerBacklogUnattended": [BACKLOG],
            },
            monday + HOUR: {"LeaseWorkerDown": [DOWN], "LeaseWorkerBacklogUnattended": [BACKLOG]},
        },
        evaluation_s=60,
    )


def keda_at_its_minimum() -> Timeline:
    """minReplicaCount 2 (the example overlay's) and an idle queue, so KEDA's scaler is
    inactive: one pod stops answering at 10 minutes, the other at 30."""
    first = tl.steady("lease-worker-5d8f-a", "10.0.1.1:9100", 0)
    second = tl.steady("lease-worker-5d8f-b", "10.0.1.2:9100", 0)
    series = pods_up(first, second)
    series[f"up{{{worker(first)}}}"] = tl.steps((0, 1), (30 * MIN, 0))
    series[f"up{{{worker(second)}}}"] = tl.steps((0, 1), (10 * MIN, 0))
    return Timeline(
        Clock(15, 45 * MIN),
        {
            **series,
            **scaled_object(tl.constant(2), tl.constant(2)),
            **keda(tl.constant(0), tl.constant(0)),
        },
        {
            # One pod of two from 10 minutes: pending for 5 minutes, then firing.
            **{t: {} for t in (5 * MIN, 10 * MIN, 15 * MIN - 15)},
            **every(15 * MIN, 45 * MIN, 5 * MIN, {"LeaseWorkerDown": [DOWN]}),
        },
    )


def long_handlers_hold_every_slot() -> Timeline:
    """10 handlers of 30 minutes take every slot of the one pod (max-in-flight 10): nothing
    else is received or completes meanwhile, their leases renewed 10 every 30 s. KEDA
    counts the 10 in flight. Healthy: nothing pages."""
    pod = tl.steady("lease-worker-5d8f-x2x9q", "10.0.1.7:9100", 0)
    done_s = 31 * MIN
    queue = JOBS
    series: dict[str, State] = {
        **pods_up(pod),
        f"lease_worker_ready{{{worker(pod)}}}": tl.constant(1),
        f"lease_worker_event_loop_lag_seconds{{{worker(pod)}}}": tl.constant(0.002),
        f"lease_worker_messages_received_total{{{worker(pod, queue)}}}": tl.steps(
            (0, 0), (MIN, 10)
        ),
        f"lease_worker_lease_renewals_total{{{worker(pod, queue)}}}": tl.rising(1 / 3, MIN, done_s),
        f'lease_worker_leases_lost_total{{{worker(pod, queue)},reason="lapsed"}}': tl.constant(0),
        f'lease_worker_queue_messages{{{worker(pod, queue)},state="in_flight"}}': tl.steps(
            (0, 0), (MIN, 10), (done_s, 0)
        ),
        f'lease_worker_queue_messages{{{worker(pod, queue)},state="visible"}}': tl.constant(0),
        f"lease_worker_queue_oldest_message_age_seconds{{{worker(pod, queue)}}}": tl.constant(2),
        **scaled_object(tl.constant(1), tl.constant(1)),
        **keda(tl.steps((0, 1), (done_s, 0)), tl.steps((0, 10), (done_s, 0))),
    }
    for outcome in ("succeeded", "failed", "timed_out"):
        count = tl.steps((0, 0), (done_s, 10 if outcome == "succeeded" else 0))
        series[
            f'lease_worker_messages_handled_total{{{worker(pod, queue)},outcome="{outcome}"}}'
        ] = count
    return Timeline(Clock(15, 40 * MIN), series, every(0, 40 * MIN, 2 * MIN, {}))


def stuck_workers() -> Timeline:
    """Messages wait; the pod receives them but loses every lease (its role lost
    sqs:ChangeMessageVisibility): each handler is cancelled, the message comes back,
    nothing completes and no lease is renewed. Stuck, not busy."""
    pod = tl.steady("lease-worker-5d8f-x2x9q", "10.0.1.7:9100", 0)
    queue = JOBS
    lost = tl.rising(1 / 12, MIN)
    series: dict[str, State] = {
        **pods_up(pod),
        f"lease_worker_ready{{{worker(pod)}}}": tl.constant(1),
        f"lease_worker_messages_received_total{{{worker(pod, queue)}}}": tl.rising(1 / 12),
        f'lease_worker_messages_handled_total{{{worker(pod, queue)},outcome="lease_lost"}}': lost,
        f'lease_worker_messages_handled_total{{{worker(pod, queue)},outcome="succeeded"}}': (
            tl.constant(0)
        ),
        f"lease_worker_lease_renewals_total{{{worker(pod, queue)}}}": tl.constant(0),
        f'lease_worker_leases_lost_total{{{worker(pod, queue)},reason="AccessDenied"}}': lost,
        **scaled_object(tl.constant(1), tl.constant(1)),
        **keda(tl.constant(1), tl.constant(40)),
    }
    lost_only = {"LeaseWorkerLeasesLost": [ON_QUEUE]}
    return Timeline(
        Clock(15, 40 * MIN),
        series,
        {
            # No progress from the start: pending for 15 minutes, then firing.
            **{t: lost_only for t in (5 * MIN, 10 * MIN, 15 * MIN - 15)},
            **every(
                15 * MIN,
                40 * MIN,
                5 * MIN,
                {**lost_only, "LeaseWorkerBacklogUnattended": [BACKLOG]},
            ),
        },
    )


def dead_letters_while_pods_come_and_go() -> Timeline:
    """Every pod reports the dead-letter queue's depth. A node pool upgrade: the two pods
    (2 dead letters) leave at 10 minutes, two new ones start at 12 and see 5; at 30 the
    pods go again, and the one back at 34 sees 8. No pod's own series ever grows."""
    pods = [
        tl.steady("lease-worker-5d8f-a", "10.0.1.1:9100", 0, 10 * MIN),
        tl.steady("lease-worker-5d8f-b", "10.0.1.2:9100", 0, 10 * MIN),
        tl.steady("lease-worker-7c4d-c", "10.0.2.3:9100", 12 * MIN, 30 * MIN),
        tl.steady("lease-worker-7c4d-d", "10.0.2.4:9100", 12 * MIN, 30 * MIN),
        tl.steady("lease-worker-7c4d-e", "10.0.3.5:9100", 34 * MIN),
    ]
    depth = tl.steps((0, 2), (10 * MIN, 5), (30 * MIN, 8))
    series: dict[str, State] = {}
    for pod in pods:
        series[f"up{{{worker(pod)}}}"] = pod.up
        labels = worker(pod, 'queue="jobs",dead_letter_queue="jobs-dlq"')
        series[f"lease_worker_dead_letter_queue_messages{{{labels}}}"] = pod.while_running(depth)
    growing = {"LeaseWorkerDeadLetterQueueGrowing": [DLQ]}
    quiet_at = (5 * MIN, 11 * MIN, 26 * MIN, 32 * MIN, 46 * MIN, 55 * MIN)
    grows_at = (12 * MIN + 30, 15 * MIN, 20 * MIN, 24 * MIN, 34 * MIN + 30, 40 * MIN, 44 * MIN)
    return Timeline(
        Clock(15, 55 * MIN),
        series,
        {**{t: {} for t in quiet_at}, **{t: growing for t in grows_at}},
    )


TIMELINES: dict[str, Callable[[], Timeline]] = {
    build.__name__: build
    for build in (
        crash_loop_for_an_hour,
        start_ups_that_fail,
        pods_replaced,
        keda_at_zero_over_a_weekend,
        keda_at_its_minimum,
        long_handlers_hold_every_slot,
        stuck_workers,
        dead_letters_while_pods_come_and_go,
    )
}


def promtool_tests(timeline: Timeline, rules_path: Path = RULES) -> dict[str, Any]:
    found = rules(rules_path)
    checks = []
    for t, firing in sorted(timeline.checks.items()):
        assert set(firing) <= set(found), firing
        for name, rule in found.items():
            alerts = []
            for labels in firing.get(name, []):
                assert labels["namespace"] == NAMESPACE, (name, labels)
                exact = {**rule["labels"], **labels}
                notes = {key: expand(text, exact) for key, text in rule["annotations"].items()}
                alerts.append({"exp_labels": exact, "exp_annotations": notes})
            checks.append({"eval_time": f"{t}s", "alertname": name, "exp_alerts": alerts})
    clock = timeline.clock
    return {
        "rule_files": [str(rules_path.resolve())],
        "evaluation_interval": f"{timeline.evaluation_s}s",
        "tests": [
            {
                "interval": clock.interval,
                "input_series": [
                    {"series": name, "values": clock.values(state)}
                    for name, state in timeline.series.items()
                ],
                "alert_rule_test": checks,
            }
        ],
    }


def run_promtool(timeline: Timeline, directory: Path, rules_path: Path = RULES) -> str:
    """promtool's report, empty when every check passes."""
    path = directory / "timeline.test.yaml"
    path.write_text(yaml.safe_dump(promtool_tests(timeline, rules_path), sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    return "" if run.returncode == 0 else run.stdout + run.stderr


@pytest.mark.parametrize("name", sorted(TIMELINES))
def test_alerts_follow_the_failure_timeline(name: str, tmp_path: Path) -> None:
    assert run_promtool(TIMELINES[name](), tmp_path) == ""


def test_every_alert_is_checked_firing_in_some_timeline_but_the_workers_own() -> None:
    """The timelines are for the alerts that judge the fleet from outside (and the queue's
    dead letters); each of those fires somewhere, with `namespace` among its labels."""
    fired = {
        name
        for build in TIMELINES.values()
        for firing in build().checks.values()
        for name in firing
    }
    assert fired >= {
        "LeaseWorkerDown",
        "LeaseWorkerCrashLooping",
        "LeaseWorkerBacklogUnattended",
        "LeaseWorkerDeadLetterQueueGrowing",
    }
