"""The fault proxy in front of the real API server: requests pass through with the client's identity (RBAC still
judges the client), errors and delays fire as many times as asked and only where they match, watches stream through
it as events happen and can be dropped or expired, probabilistic faults are seeded; and the faults themselves
(matching in RBAC terms, refusal of meaningless fields) without a server."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from dl2.kube.rest import CONFIGMAPS, PODS, Resource, Rest
from testbed.controlplane.faults import Fault, FaultInjector, FaultKind
from testbed.controlplane.install import CONTROLLER, service_account_user
from testbed.controlplane.proxy import FaultProxy
from testbed.controlplane.recording import request_record

NS = "default"
TESTER = "dl2-proxy-tester"
"""A ServiceAccount of these tests only: a denial of one of dl2's own would fail the session (`kube_fixtures`)."""
TESTER_USER = service_account_user(TESTER, NS)
AGENT = "dl2-proxy-test"
LABELS = {"dl2-test": "proxy"}
SELECTOR = "dl2-test=proxy"
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
CLOCK = "dl2-clock"
"""The one ConfigMap in dl2-system the controller may watch (`k8s/rbac.yaml`); the fixture's reset deletes it."""


@pytest.fixture(scope="module")
def tester(kube_session) -> Iterator[str]:
    """The token of a ServiceAccount that may do anything to ConfigMaps in `default`, and nothing else."""
    admin = kube_session.rest()
    token = kube_session.plane.service_account_token(NS, TESTER)
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]
    admin.create(ROLES, NS, {"metadata": {"name": TESTER}, "rules": rules})
    admin.create(
        ROLE_BINDINGS,
        NS,
        {
            "metadata": {"name": TESTER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TESTER},
            "subjects": [{"kind": "ServiceAccount", "name": TESTER, "namespace": NS}],
        },
    )
    direct = Rest(kube_session.plane.client(token=token))
    wait_for(lambda: _allowed(direct), "the tester's RoleBinding in force")
    yield token
    admin.request("DELETE", ROLE_BINDINGS.path(NS, TESTER))
    admin.request("DELETE", ROLES.path(NS, TESTER))
    admin.request("DELETE", Resource("", "v1", "serviceaccounts").path(NS, TESTER))


def _allowed(rest: Rest) -> bool:
    try:
        rest.list(CONFIGMAPS, NS, labelSelector=SELECTOR)
    except ApiException as error:
        if error.status == 403:  # the authorizer's cache has not seen the binding yet
            return False
        raise
    return True


@pytest.fixture
def proxy(kube) -> Iterator[FaultProxy]:
    with FaultProxy(kube.url, kube.plane.ca) as running:
        yield running
    kube.rest().request("DELETE", CONFIGMAPS.path(NS), query={"labelSelector": SELECTOR})


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def as_tester(kube, proxy: FaultProxy, token: str, agent: str = AGENT) -> Rest:
    return Rest(kube.plane.client(token=token, server=proxy.url, user_agent=agent))


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": LABELS}, "data": data}


def raw(
    proxy: FaultProxy, method: str, path: str, token: str | None = None, timeout_s: float = 5.0
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One plain HTTP request to the proxy: status, headers and JSON body as they came."""
    address = urllib.parse.urlsplit(proxy.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=timeout_s)
    headers = {"Accept": "application/json", "User-Agent": AGENT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read() or b"{}")
    finally:
        connection.close()


def audited(kube, offset: int, user: str, count: int) -> list[tuple[str, str, int, str]]:
    """(verb, resource, code, user agent) of the user's requests in the audit log since `offset`, once there are
    `count` of them (the log is written as requests complete)."""
    found: list[tuple[str, str, int, str]] = []

    def enough() -> bool:
        found[:] = [
            (e.verb, e.rbac_resource, e.code, e.user_agent) for e in kube.plane.audit_events(offset) if e.user == user
        ]
        return len(found) >= count

    wait_for(enough, f"{count} audit events of {user}")
    return found


class Watcher:
    """A watch read on a thread: its events, and how it ended (None: cleanly, as a server ends a watch)."""

    def __init__(self, rest: Rest, namespace: str, resource_version: str, **query: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.stream = rest.watch(CONFIGMAPS, namespace, resource_version, timeout_s=30, **query)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.events.extend(event for event in self.stream if event["type"] != "BOOKMARK")
        except Exception as error:
            self.error = error

    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    def ended(self, timeout_s: float = 10.0) -> bool:
        self.thread.join(timeout_s)
        return not self.thread.is_alive()

    def close(self) -> None:
        self.stream.close()
        self.thread.join(5)


def watch_the_clock(kube, proxy: FaultProxy) -> Watcher:
    """The controller's watch of its clock ConfigMap, through the proxy, as `dl2 serve` opens it."""
    rest = Rest(kube.controller_api(server=proxy.url))
    selector = f"metadata.name={CLOCK}"
    _, version = rest.list_at(CONFIGMAPS, "dl2-system", fieldSelector=selector)
    return Watcher(rest, "dl2-system", version, fieldSelector=selector)


# -- through the proxy ------------------------------------------------------------------------------------------


def test_requests_pass_through_with_the_clients_identity(kube, proxy, tester):
    offset = kube.plane.audit_offset()
    rest = as_tester(kube, proxy, tester, agent=f"{AGENT}/identity")
    review = rest.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == TESTER_USER  # the token's, not the proxy's
    assert rest.create(CONFIGMAPS, NS, configmap("probe", k="v"))["data"] == {"k": "v"}  # the body went through
    with pytest.raises(ApiException) as denied:
        rest.list(PODS, NS)
    assert denied.value.status == 403 and TESTER_USER in denied.value.body  # the upstream's RBAC judged it
    assert Rest(kube.controller_api(server=proxy.url)).list(PODS, "dl2-system") == []  # dl2's controller may list
    with pytest.raises(ApiException) as anonymous:
        Rest(kube.plane.client(server=proxy.url)).list(PODS, NS)  # the admin's client, certificate and all
    assert anonymous.value.status in (401, 403)  # a client certificate ends at the proxy: the upstream sees nobody
    assert [(r.verb, r.rbac_resource, r.code) for r in proxy.requests()] == [
        ("create", "selfsubjectreviews", 201),
        ("create", "configmaps", 201),
        ("list", "pods", 403),
        ("list", "pods", 200),
        ("list", "pods", anonymous.value.status),
    ]
    tester_requests = audited(kube, offset, TESTER_USER, 3)
    assert [(verb, resource, code) for verb, resource, code, _ in tester_requests] == [
        ("create", "selfsubjectreviews", 201),
        ("create", "configmaps", 201),
        ("list", "pods", 403),
    ]
    assert {agent for *_, agent in tester_requests} == {f"{AGENT}/identity"}  # the User-Agent as the client sent it


def test_error_faults_fire_count_times_and_only_where_they_match(kube, proxy, tester):
    offset = kube.plane.audit_offset()
    rest = as_tester(kube, proxy, tester)
    rest.create(CONFIGMAPS, NS, configmap("probe"))
    proxy.add_fault(Fault(FaultKind.ERROR, code=409, verb="patch", resource="configmaps", count=2))
    proxy.add_fault(Fault(FaultKind.ERROR, code=500, verb="get", resource="configmaps", count=1))
    elsewhere = [
        proxy.add_fault(Fault(FaultKind.ERROR, code=503, user_agent="someone-else")),
        proxy.add_fault(Fault(FaultKind.ERROR, code=503, resource="configmaps", namespace="kube-system")),
        proxy.add_fault(Fault(FaultKind.ERROR, code=503, resource="configmaps", group="apps")),
        proxy.add_fault(Fault(FaultKind.ERROR, code=503, resource="configmaps/status")),
    ]
    answers = []
    for value in ("1", "2", "3"):
        try:
            answers.append(rest.patch(CONFIGMAPS, NS, "probe", {"data": {"n": value}})["data"])
        except ApiException as error:
            answers.append((error.status, json.loads(error.body)["reason"]))
    assert answers == [(409, "Conflict"), (409, "Conflict"), {"n": "3"}]
    assert [item["metadata"]["name"] for item in rest.list(CONFIGMAPS, NS, labelSelector=SELECTOR)] == [
        "probe"
    ]  # a list is not a get
    with pytest.raises(ApiException) as failed:
        rest.get(CONFIGMAPS, NS, "probe")
    status = json.loads(failed.value.body)
    assert (failed.value.status, status["kind"], status["reason"], status["code"]) == (
        500,
        "Status",
        "InternalError",
        500,
    )
    assert rest.get(CONFIGMAPS, NS, "probe")["data"] == {"n": "3"}
    proxy.add_fault(Fault(FaultKind.ERROR, code=429, verb="get", count=1, retry_after_s=3))
    code, headers, body = raw(proxy, "GET", CONFIGMAPS.path(NS, "probe"), tester)
    assert (code, headers["Retry-After"], body["reason"], body["details"]) == (
        429,
        "3",
        "TooManyRequests",
        {"retryAfterSeconds": 3},
    )
    assert raw(proxy, "GET", CONFIGMAPS.path(NS, "probe"), tester)[0] == 200
    assert [active.fault_id for active in proxy.faults()] == elsewhere  # the counted ones are used up
    patches = [r.code for r in proxy.requests() if r.verb == "patch"]
    assert patches == [409, 409, 200] and proxy.counts()[("patch", "configmaps")] == 3
    # nothing an error answered reached the server: one patch and two gets of the tester's are in its audit log
    reached = audited(kube, offset, TESTER_USER, 5)
    assert [(verb, code) for verb, _, code, _ in reached] == [
        ("create", 201),
        ("patch", 200),
        ("list", 200),
        ("get", 200),
        ("get", 200),
    ]
    assert proxy.remove_fault(elsewhere[0]) and not proxy.remove_fault(elsewhere[0])
    proxy.clear_faults()
    assert proxy.faults() == []


def test_a_delay_fault_makes_a_client_with_a_short_timeout_time_out(kube, proxy, tester):
    rest = as_tester(kube, proxy, tester)
    rest.timeout_s = 0.3
    proxy.add_fault(Fault(FaultKind.DELAY, delay_s=1.0, verb="list", resource="configmaps", count=1))
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        rest.list(CONFIGMAPS, NS, labelSelector=SELECTOR)
    assert time.monotonic() - started < 0.9
    assert rest.list(CONFIGMAPS, NS, labelSelector=SELECTOR) == []  # the count is used up
    rest.timeout_s = 5.0
    proxy.add_fault(Fault(FaultKind.DELAY, delay_s=0.4, verb="list", resource="configmaps", count=1))
    started = time.monotonic()
    assert rest.list(CONFIGMAPS, NS, labelSelector=SELECTOR) == []  # a patient client gets its answer, late
    assert time.monotonic() - started >= 0.4


def test_a_watch_streams_events_as_they_happen_until_the_proxy_drops_it(kube, proxy):
    watcher = watch_the_clock(kube, proxy)
    try:
        wait_for(lambda: proxy.open_watches("configmaps") == 1, "the watch to open")
        admin = kube.rest()
        admin.create(CONFIGMAPS, "dl2-system", {"metadata": {"name": CLOCK}, "data": {"slot": "0"}})
        wait_for(lambda: watcher.types() == ["ADDED"], "the ADDED event")
        admin.patch(CONFIGMAPS, "dl2-system", CLOCK, {"data": {"slot": "1"}})
        wait_for(lambda: watcher.types() == ["ADDED", "MODIFIED"], "the MODIFIED event")
        assert watcher.thread.is_alive()  # each event came while the stream was open: streamed, not buffered
        assert watcher.events[-1]["object"]["data"] == {"slot": "1"}
        assert proxy.drop_watches("pods") == 0 and proxy.drop_watches("configmaps.apps") == 0
        assert proxy.drop_watches("configmaps") == 1
        assert watcher.ended(5) and watcher.error is None  # ended as a server ends a watch: the client watches again
        assert proxy.open_watches() == 0
        assert [(r.verb, r.code) for r in proxy.requests()] == [("list", 200), ("watch", 200)]
    finally:
        watcher.close()


def test_drop_watch_faults_and_abrupt_drops_end_a_watch(kube, proxy):
    proxy.add_fault(Fault(FaultKind.DROP_WATCH, delay_s=0.3, resource="configmaps", count=1))
    started = time.monotonic()
    watcher = watch_the_clock(kube, proxy)
    assert watcher.ended(5) and watcher.error is None
    assert 0.3 <= time.monotonic() - started < 5  # after the fault's delay, long before the watch's own timeout
    watcher = watch_the_clock(kube, proxy)
    try:
        wait_for(lambda: proxy.open_watches() == 1, "the watch to open")
        assert proxy.drop_watches(abrupt=True) == 1
        assert watcher.ended(5)  # broken off mid-stream: the client sees a broken response
        assert isinstance(watcher.error, urllib3.exceptions.ProtocolError)
    finally:
        watcher.close()
    proxy.add_fault(Fault(FaultKind.DROP_WATCH, delay_s=0.1, abrupt=True, count=1))
    watcher = watch_the_clock(kube, proxy)
    assert watcher.ended(5) and isinstance(watcher.error, urllib3.exceptions.ProtocolError)
    watcher = watch_the_clock(kube, proxy)
    wait_for(lambda: proxy.open_watches() == 1, "the watch to open")
    proxy.stop()  # a proxy that stops ends its watches as a server shutting down does
    assert watcher.ended(5) and watcher.error is None


def test_an_expire_watch_fault_answers_410_expired_and_the_client_must_list_again(kube, proxy):
    offset = kube.plane.audit_offset()
    proxy.add_fault(Fault(FaultKind.EXPIRE_WATCH, resource="configmaps", count=1))
    watcher = watch_the_clock(kube, proxy)  # its list is not a watch: untouched
    assert watcher.ended(5) and watcher.error is None
    (event,) = watcher.events
    assert event["type"] == "ERROR"
    assert {key: event["object"][key] for key in ("kind", "code", "reason")} == {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
    }
    assert event["object"]["message"].startswith("too old resource version: ")
    assert [(r.verb, r.code) for r in proxy.requests()] == [("list", 200), ("watch", 200)]
    watcher = watch_the_clock(kube, proxy)  # the count is used up: a real watch
    try:
        wait_for(lambda: proxy.open_watches() == 1, "the watch to open")
    finally:
        watcher.close()
    verbs = [verb for verb, *_ in audited(kube, offset, service_account_user(CONTROLLER), 3)]
    assert verbs == ["list", "list", "watch"]  # the expired watch never reached the server


def test_probabilistic_faults_fire_on_the_same_requests_for_the_same_seed(kube, tester):
    def codes(seed: int) -> list[int]:
        with FaultProxy(kube.url, kube.plane.ca, seed=seed) as proxy:
            proxy.add_fault(Fault(FaultKind.ERROR, code=500, verb="list", resource="configmaps", probability=0.5))
            return [raw(proxy, "GET", CONFIGMAPS.path(NS), tester)[0] for _ in range(24)]

    first = codes(7)
    assert first == codes(7) and first != codes(8)
    assert set(first) == {200, 500}


# -- faults without a server ------------------------------------------------------------------------------------


def request(verb_method: str, path: str, agent: str = AGENT, **query: str):
    return request_record(verb_method, path, query, agent)


def test_faults_match_requests_in_rbac_terms():
    patch_scale = request("PATCH", "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs/j/scale")
    assert (patch_scale.verb, patch_scale.rbac_resource, patch_scale.resource_key) == (
        "patch",
        "pytorchjobs/scale",
        "pytorchjobs.kubeflow.org",
    )
    assert Fault(FaultKind.ERROR, verb="patch", resource="pytorchjobs/scale").matches(patch_scale)
    assert not Fault(FaultKind.ERROR, resource="pytorchjobs").matches(patch_scale)  # a subresource is its own
    assert Fault(FaultKind.ERROR, group="kubeflow.org", namespace="team-a").matches(patch_scale)
    assert not Fault(FaultKind.ERROR, group="").matches(patch_scale)
    assert not Fault(FaultKind.ERROR, namespace="team-b").matches(patch_scale)
    assert Fault(FaultKind.ERROR, user_agent="proxy-test").matches(patch_scale)
    assert not Fault(FaultKind.ERROR, user_agent="dl2-serve").matches(patch_scale)
    watch = request("GET", "/api/v1/pods", watch="true")
    listing = request("GET", "/api/v1/pods")
    assert (watch.verb, watch.namespace, listing.verb) == ("watch", "", "list")
    for kind in (FaultKind.DROP_WATCH, FaultKind.EXPIRE_WATCH):
        assert Fault(kind).matches(watch) and not Fault(kind).matches(listing)  # watch kinds touch watches only
    discovery = request("GET", "/apis/kubeflow.org/v1")
    assert (discovery.verb, discovery.resource, discovery.non_resource_url) == ("get", "", "/apis/kubeflow.org/v1")
    assert Fault(FaultKind.ERROR).matches(discovery) and not Fault(FaultKind.ERROR, resource="pods").matches(discovery)
    assert Fault("delay", delay_s=1.0).kind is FaultKind.DELAY  # a kind by its value


def test_the_injector_adds_delays_answers_once_and_uses_counts_only_when_it_fires():
    injector = FaultInjector()
    injector.add(Fault(FaultKind.DELAY, delay_s=0.5, verb="list"))
    injector.add(Fault(FaultKind.DELAY, delay_s=0.25))
    first = injector.add(Fault(FaultKind.ERROR, code=409, verb="patch", count=1))
    second = injector.add(Fault(FaultKind.ERROR, code=500, verb="patch", count=1))
    injector.add(Fault(FaultKind.DROP_WATCH, delay_s=2.0))
    injector.add(Fault(FaultKind.DROP_WATCH, delay_s=1.0, abrupt=True))
    listing = injector.decide(request("GET", "/api/v1/pods"))
    assert (listing.delay_s, listing.error, listing.drop_after_s) == (0.75, None, None)
    watching = injector.decide(request("GET", "/api/v1/pods", watch="true"))
    assert (watching.delay_s, watching.drop_after_s, watching.abrupt) == (0.25, 1.0, True)  # the earliest drop
    patch = request("PATCH", "/api/v1/namespaces/a/pods/p")
    answered = injector.decide(patch).error
    assert answered is not None and answered.code == 409  # the first error answers; the second keeps its count
    assert [active.fault_id for active in injector.active()].count(first) == 0
    assert [active.remaining for active in injector.active() if active.fault_id == second] == [1]
    answered = injector.decide(patch).error
    assert answered is not None and answered.code == 500 and answered.status()["reason"] == "InternalError"
    assert injector.decide(patch).error is None
    throttled = FaultInjector()
    throttled.add(Fault(FaultKind.ERROR, code=429, retry_after_s=2))
    error = throttled.decide(patch).error
    assert error is not None and (error.headers, error.status()["details"]) == (
        {"Retry-After": "2"},
        {"retryAfterSeconds": 2},
    )


def test_probability_is_drawn_from_the_seed_and_a_miss_uses_no_count():
    def fired(seed: int) -> list[bool]:
        injector = FaultInjector(seed)
        injector.add(Fault(FaultKind.ERROR, code=500, probability=0.3))
        return [injector.decide(request("GET", "/api/v1/pods")).error is not None for _ in range(60)]

    assert fired(7) == fired(7) and fired(7) != fired(8) and 6 < sum(fired(7)) < 30
    injector = FaultInjector(3)
    injector.add(Fault(FaultKind.ERROR, code=500, probability=0.2, count=2))
    outcomes = [injector.decide(request("GET", "/api/v1/pods")).error is not None for _ in range(200)]
    assert sum(outcomes) == 2 and outcomes.count(False) > 2 and injector.active() == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "crash"}, "unknown fault kind"),
        ({"kind": FaultKind.ERROR, "code": 200}, "4xx or 5xx"),
        ({"kind": FaultKind.ERROR, "probability": 1.5}, "probability"),
        ({"kind": FaultKind.DELAY, "count": 0}, "count"),
        ({"kind": FaultKind.DELAY, "delay_s": -1.0}, "delay_s"),
        ({"kind": FaultKind.DELAY, "delay_s": float("inf")}, "delay_s"),
        ({"kind": FaultKind.ERROR, "code": 429, "retry_after_s": -1}, "retry_after_s"),
        ({"kind": FaultKind.ERROR, "verb": "lists"}, "unknown verb"),
        ({"kind": FaultKind.DROP_WATCH, "verb": "list"}, "watches only"),
        ({"kind": FaultKind.EXPIRE_WATCH, "verb": "get"}, "watches only"),
        ({"kind": FaultKind.ERROR, "abrupt": True}, "abrupt"),
    ],
)
def test_meaningless_faults_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Fault(**fields)
