"""Health that means progress, end to end on the real control plane, versitygw and Prometheus: `dl2 serve` refuses
a record store it cannot write with one line; a store that goes down under a running `dl2 serve` makes it unready
within two slots, says why on the SchedulerPolicy and fires the shipped `Dl2SlotsStalled` alert, all of which
clears when the store is back; a replica the API server does not answer is unready until it does; a restarted
controller clears the `Fallback` a killed one left, with `Recovered`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.leader import LeaseConfig, LeaseElector
from dl2.kube.metrics import HealthServer
from dl2.kube.policy import POLICIES
from dl2.kube.rest import EVENTS, MERGE_PATCH
from dl2.sim.config import SimConfig
from testbed.controlplane.assets import AssetsMissing
from testbed.controlplane.objectstore import object_store
from testbed.controlplane.processes import free_port
from testbed.controlplane.prometheus import prometheus
from testbed.controlplane.proxy import FaultProxy
from tests.builders import heuristic_loader, tiny_workload

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "models" / "dl2-philly"
RULES = ROOT / "k8s" / "monitoring" / "prometheusrule.yaml"
CONFIG = SimConfig.realistic(seed=1)


def serve_command(kubeconfig: Path, decision_log: str, models: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "dl2.cli.main", "serve", "--kubeconfig", str(kubeconfig), "--decision-log", decision_log,
        "--models-dir", str(models), "--metrics-host", "127.0.0.1", "--identity", "dl2-scheduler-0",
        "--no-leader-election", *extra,
    ]  # fmt: skip


def test_serve_refuses_a_record_store_it_cannot_write_with_one_line(kube, s3_session, tmp_path):
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", token=kube.identities.controller)

    def serve(decision_log: str, **env: str) -> tuple[int, list[str]]:
        command = serve_command(kubeconfig, decision_log, tmp_path, "--metrics-port", "0")
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
        return done.returncode, done.stderr.splitlines()

    code, lines = serve("s3://REPLACE-WITH-YOUR-BUCKET/dl2")
    assert code == 2 and lines == [
        "dl2 serve: error: --decision-log: 's3://REPLACE-WITH-YOUR-BUCKET/dl2' is not allowed (the shipped "
        "placeholder: set your bucket, DL2_DECISION_LOG in the ConfigMap dl2-scheduler-config (k8s/configmap.yaml) "
        "or the chart's records.url)"
    ]
    code, lines = serve("s3://dl2-no-such-bucket/dl2")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        "dl2 serve: error: decision log s3://dl2-no-such-bucket/dl2/dl2-local: cannot write and read back a probe "
        "object (FileNotFoundError: "
    )
    started = time.monotonic()
    code, lines = serve(s3_session.bucket("dl2-tests") + "/probe", AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    assert code == 2 and len(lines) == 1, lines
    assert "cannot write and read back a probe object (EndpointConnectionError: Could not connect" in lines[0]
    assert time.monotonic() - started < 60  # botocore's retries, then out: not a loop of failing slots


# -- a store that goes down under a running controller -----------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(what: str, timeout_s: float, probe: Any, poll_s: float = 0.25) -> Any:
    """Poll `probe` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        time.sleep(poll_s)


def firing(prometheus_url: str) -> set[str]:
    """The alerts Prometheus has firing now."""
    alerts = json.loads(get(f"{prometheus_url}/api/v1/alerts")[1])["data"]["alerts"]
    return {alert["labels"]["alertname"] for alert in alerts if alert["state"] == "firing"}


def ready_condition(policies: Any, status: str) -> dict[str, Any] | None:
    """The SchedulerPolicy's Ready condition if its status is `status` ("True" or "False"), else None."""
    conditions = (policies.read().get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready" and c["status"] == status), None)


def readyz(base: str, code: int) -> str | None:
    """What `/readyz` says if it answers `code`, else None."""
    answer, reason = get(f"{base}/readyz")
    return reason if answer == code else None


@pytest.mark.slow
def test_a_record_store_that_goes_down_stalls_the_controller_visibly_until_it_is_back(kube, policies, tmp_path):
    """The store (versitygw) stops between two slots: every attempt of the next slot fails with botocore's
    EndpointConnectionError. Within two slots `/readyz` answers 503, the SchedulerPolicy says `Ready=False`,
    `SlotsFailing` and the error, and Prometheus, evaluating the shipped rules on what it scrapes, fires
    `Dl2SlotsStalled`; `/healthz` stays 200. When the store is back a slot completes and all of it clears."""
    slot_s = 20.0
    models = tmp_path / "models" / "dl2-policy"
    models.mkdir(parents=True)
    (models / "1").symlink_to(MODEL)
    policies.create("shadow")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    groups = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", token=kube.identities.controller)
    with ExitStack() as running:
        outage = ExitStack()
        running.callback(outage.close)
        try:
            store = outage.enter_context(object_store(tmp_path / "s3" / "data", tmp_path / "s3" / "logs"))
            prometheus_url = running.enter_context(
                prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], 1.0,
                           {"namespace": "dl2-system", "pod": "dl2-scheduler-0"}, groups)
            )  # fmt: skip
        except AssetsMissing as error:
            pytest.fail(f"{error} (make test builds it)")
        command = serve_command(kubeconfig, store.bucket("records") + "/dl2", tmp_path / "models",
                                "--metrics-port", str(port), "--slot-s", str(slot_s))  # fmt: skip
        with open(tmp_path / "serve.log", "w") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **store.environment()}
            )
        running.callback(lambda: (process.terminate(), process.wait(20)))

        # a slot completes: ready, and the status says so
        def slot_done() -> int | None:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            last = (policies.read().get("status") or {}).get("lastSlot")
            now = int(time.time() // slot_s)
            return last if last == now and ready_condition(policies, "True") else None

        last = wait_for("completed slot", 120, slot_done)
        assert get(f"{base}/readyz") == (200, "ready\n")
        boundary = (last + 1) * slot_s
        time.sleep(max(boundary - time.time() - 1.5, 0))
        assert "Dl2SlotsStalled" not in firing(prometheus_url)  # evaluated for a slot and more: quiet while slots run
        outage.close()  # the store goes away just before the next slot

        reason = wait_for("503", 3 * slot_s, lambda: readyz(base, 503))
        unready_after_s = time.time() - boundary
        assert unready_after_s <= 2 * slot_s, unready_after_s
        assert reason.startswith("SlotsFailing: ") and "EndpointConnectionError: Could not connect" in reason
        assert get(f"{base}/healthz") == (200, "ok\n")
        condition = wait_for("Ready=False", 15, lambda: ready_condition(policies, "False"))
        assert condition["reason"] == "SlotsFailing" and "EndpointConnectionError" in condition["message"]
        wait_for("Dl2SlotsStalled firing", 2 * slot_s + 30, lambda: "Dl2SlotsStalled" in firing(prometheus_url), 1.0)
        fired_after_s = time.time() - boundary
        assert (policies.read().get("status") or {}).get("lastSlot") == last  # no slot completed meanwhile

        with object_store(tmp_path / "s3" / "data", tmp_path / "s3" / "logs-again", like=store):
            assert wait_for("ready again", slot_s + 30, lambda: readyz(base, 200)) == "ready\n"
            condition = wait_for("Ready=True", 15, lambda: ready_condition(policies, "True"))
            assert condition["reason"] == "Ready"
            wait_for("the alert resolved", 30, lambda: "Dl2SlotsStalled" not in firing(prometheus_url), 1.0)
            assert (policies.read().get("status") or {}).get("lastSlot") > last
    print(f"store stopped 1.5 s before a slot of {slot_s:g} s: /readyz 503 {unready_after_s:.1f} s into it, "
          f"Dl2SlotsStalled firing at {fired_after_s:.1f} s")  # fmt: skip


# -- an API server that does not answer ---------------------------------------------------------------------------


def test_a_replica_the_api_server_does_not_answer_is_unready_until_it_does(kube, policies, tmp_path):
    """The controller reaches the API server through a proxy, which stops: its Lease renewals get no answer, it
    stops leading within the renew deadline (2 s here), and `/readyz` says why; when the proxy is back on the same
    port it leads and is ready again. (The status cannot be written meanwhile: the readiness is what tells.)"""
    policies.create("shadow")
    proxy = FaultProxy(kube.url, kube.plane.ca).start()
    lease = LeaseConfig(lease_s=3.0, renew_deadline_s=2.0, retry_s=0.2)
    api = kube.controller_api("a", server=proxy.url)
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", slot_s=3600.0, request_timeout_s=1.0)
    controller = Controller(api, config, heuristic_loader("drf"), elector=LeaseElector(api, "a", lease))
    health = HealthServer(controller.metrics, controller.health, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{health.port}"
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for("ready", 30, lambda: readyz(base, 200)) == "ready\n"
        proxy.stop()
        stopped = time.monotonic()
        reason = wait_for("503", 15, lambda: readyz(base, 503))
        unready_after_s = time.monotonic() - stopped
        assert reason.startswith("ApiUnreachable: the API server has not answered for ") and "Error" in reason
        assert unready_after_s <= lease.renew_deadline_s + 2 * lease.retry_s + 1.0, unready_after_s
        assert get(f"{base}/healthz") == (200, "ok\n") and not controller.is_leader()
        proxy = FaultProxy(kube.url, kube.plane.ca, port=proxy.port).start()
        assert wait_for("ready again", 30, lambda: readyz(base, 200)) == "ready\n"
        assert wait_for("leading again", 10, controller.is_leader)
    finally:
        stop.set()
        thread.join(30)
        health.stop()
        proxy.stop()
    print(f"API server unreachable: /readyz 503 after {unready_after_s:.1f} s (renew deadline 2 s)")


# -- a stale Fallback -------------------------------------------------------------------------------------------


def test_a_restarted_controller_clears_the_fallback_a_killed_one_left_with_recovered(
    kube, policies, twin, run_slot, tmp_path
):
    with twin(tiny_workload(num_jobs=4, num_nodes=1), CONFIG):
        policies.create("active")
        # what a controller killed while the incumbent stood in leaves: Fallback=True, and a Fallback Event
        stale = {"type": "Fallback", "status": "True", "reason": "Incumbent", "message": "no-model",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}  # fmt: skip
        kube.rest().patch(POLICIES, None, "default", {"status": {"conditions": [stale]}}, MERGE_PATCH, "status")
        config = ControllerConfig("b", decision_log=tmp_path / "decisions", clock="cluster")
        controller = Controller(kube.controller_api("b"), config, heuristic_loader("drf"))
        try:
            controller.refresh_policy(policies.read())
            controller.take_over(policies.read())
            controller.publish_status()

            def fallback() -> dict[str, Any]:
                return next(c for c in policies.read()["status"]["conditions"] if c["type"] == "Fallback")

            assert fallback()["status"] == "True"  # what the previous leader said holds until a slot says otherwise
            report = run_slot(controller)
            assert report.decided and report.fallback is None
            assert (fallback()["status"], fallback()["reason"]) == ("False", "Model")
            controller.events.flush()
        finally:
            controller.cache.stop()
            controller.events.stop()
    events = [e for e in kube.rest().list(EVENTS, "default") if e["regarding"]["name"] == "default"]
    said = [(e["type"], e["reason"], e["note"]) for e in events if e["reason"] in ("Fallback", "Recovered")]
    assert said == [("Normal", "Recovered", "dl2-policy/1 decides again")]
