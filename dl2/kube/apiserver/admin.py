"""Admin endpoints under `/dl2/`, outside the Kubernetes API: set faults and read records on a running server.

    GET    /dl2/faults                    the active faults, with ids and what is left of their counts
    POST   /dl2/faults                    add one (a `Fault` as JSON, e.g. {"kind": "error", "code": 500,
                                          "verb": "patch", "resource": "pytorchjobs/scale", "count": 3}) -> {"id": n}
    DELETE /dl2/faults[/{id}]             remove all faults, or one
    POST   /dl2/watches/drop              close open watches ({"resource": "pods"} for one resource) -> {"dropped": n}
    POST   /dl2/compact                   forget the watch history: older resource versions get 410 Gone
    GET    /dl2/requests[?since=N]        the recorded requests (from the N-th on)
    DELETE /dl2/requests                  forget them
    GET    /dl2/cluster                   the simulated cluster's clock and job counts (404 without one)
    POST   /dl2/cluster/advance           run simulated slots ({"slots": n}, default 1)
    GET    /dl2/cluster/jobs              every workload job: arrival, finish, JCT, rescales

Requests to these paths are not recorded and never faulted. `curl -X POST http://127.0.0.1:PORT/dl2/faults -d
'{"kind": "delay", "delay_s": 2}'` makes every API call two seconds slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp.web
import kmock

from dl2.core import Dl2Error
from dl2.kube.apiserver import errors
from dl2.kube.apiserver.errors import ApiError
from dl2.kube.apiserver.faults import Fault, FaultInjector
from dl2.kube.apiserver.recording import RequestRecorder
from dl2.kube.apiserver.store import ObjectStore, encode


class ClusterControl(Protocol):
    """What the admin endpoints ask of a simulated cluster."""

    def status(self) -> dict[str, Any]: ...

    def advance(self, slots: int = 1) -> dict[str, Any]: ...

    def job_results(self) -> list[dict[str, Any]]: ...


class WatchDropper(Protocol):
    def __call__(self, resource: str | None = None) -> int: ...


@dataclass(slots=True)
class AdminState:
    store: ObjectStore
    recorder: RequestRecorder
    faults: FaultInjector
    drop_watches: WatchDropper
    cluster: ClusterControl | None = field(default=None)


def _json(data: Any, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.Response(body=encode(data), status=status, content_type="application/json")


class AdminEndpoints:
    def __init__(self, state: AdminState) -> None:
        self.state = state

    async def __call__(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        try:
            return self._route(request)
        except ApiError as error:
            return _json(error.status(), error.code)
        except (ValueError, TypeError, Dl2Error) as error:
            return _json(errors.bad_request(str(error)).status(), 400)

    def _route(self, request: kmock.Request) -> aiohttp.web.Response:
        state = self.state
        method = str(request.method.value)
        parts = [part for part in request.url.path.split("/") if part][1:]
        body = request.data if isinstance(request.data, dict) else {}
        if parts == ["faults"]:
            if method == "GET":
                return _json({"faults": state.faults.active()})
            if method == "POST":
                return _json({"id": state.faults.add(Fault.from_json_dict(request.data))}, 201)
            if method == "DELETE":
                cleared = len(state.faults.active())
                state.faults.clear()
                return _json({"cleared": cleared})
        if len(parts) == 2 and parts[0] == "faults" and method == "DELETE":
            if not state.faults.remove(int(parts[1])):
                raise ApiError(404, "NotFound", f"no fault with id {parts[1]}")
            return _json({"removed": int(parts[1])})
        if parts == ["watches", "drop"] and method == "POST":
            return _json({"dropped": state.drop_watches(body.get("resource"))})
        if parts == ["compact"] and method == "POST":
            state.store.compact()
            return _json({"resourceVersion": str(state.store.rv)})
        if parts == ["requests"]:
            if method == "GET":
                since = int(request.params.get("since") or 0)
                return _json({"requests": [r.to_json_dict() for r in state.recorder.records[since:]]})
            if method == "DELETE":
                state.recorder.clear()
                return _json({"cleared": True})
        if parts and parts[0] == "cluster":
            cluster = state.cluster
            if cluster is None:
                raise ApiError(404, "NotFound", "this server runs no simulated cluster (start it with --simulate)")
            if parts == ["cluster"] and method == "GET":
                return _json(cluster.status())
            if parts == ["cluster", "advance"] and method == "POST":
                slots = int(body.get("slots", 1))
                if slots < 1:
                    raise ValueError(f"slots must be at least 1, got {slots}")
                return _json(cluster.advance(slots))
            if parts == ["cluster", "jobs"] and method == "GET":
                return _json({"jobs": cluster.job_results()})
        raise ApiError(404, "NotFound", f"no admin endpoint {method} {request.url.path}")
