"""The local Kubernetes API server under load: requests per second, and the wall time of a simulated slot.

1. Requests per second: `dl2 cluster` runs in a subprocess pinned to one core; a client pinned to the other core
   sends keep-alive HTTP requests (urllib3, bodies read but not decoded) for `--seconds` each: GET of one pod
   and LIST of 2,000 pods (about 1.4 KB each, as the simulated cluster writes them), with 1 and 4 client
   threads; a LIST that a label selector narrows to 20 of the 2,000; and the same LIST through the official
   client (`CoreV1Api.list_namespaced_pod`, which also builds its typed objects: what a controller pays).
   The same GET and LIST against kmock's own `KubernetesEmulator` (which this server does not use as its store)
   show why: it finds an object by scanning all of them. A bare aiohttp handler with a fixed body is the floor
   this machine sets for one HTTP request.
2. Simulated slots: the first N jobs of the Philly week (N = 40, 400, 2,000) submitted at once on the 352-node
   Philly cluster, at the replicas their users asked for (no controller: many pods stay Pending at 2,000), run
   in-process on one core. Reported: the start (nodes, the N jobs and their Pending pods), the first slot (which
   places and binds every pod), then the median and p99 wall time of the next `--slots` - 1 slots and the
   writes per slot (resource versions used). No client reads during the run, so objects are not JSON-encoded
   (a server encodes each version once, when a response or a watch first needs it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import urllib3
from common import environment, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
NUM_OBJECTS = 2000
BARE_AIOHTTP = """
import asyncio, json
from aiohttp import web
async def pod(request):
    return web.Response(body=BODY, content_type="application/json")
BODY = b"x" * 1400
async def main():
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/bench/pods/{name}", pod)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(json.dumps({"url": f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"}), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""
"""The floor: a bare aiohttp handler answering a fixed 1.4 KB body, on the same machine (no Kubernetes at all)."""
KMOCK_SERVER = """
import asyncio, json, sys, kmock
sys.path.insert(0, "benchmarks")
from kube_apiserver import NUM_OBJECTS, pod_body
async def main():
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        emulator.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        for index in range(NUM_OBJECTS):  # stored directly: creating them over HTTP is quadratic in kmock
            body = pod_body(index)
            body["metadata"]["namespace"] = "bench"
            emulator.objects["v1/pods", "bench", body["metadata"]["name"]] = body
        print(json.dumps({"url": str(server.url).rstrip("/")}), flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


def cores() -> tuple[int, int]:
    available = sorted(os.sched_getaffinity(0))
    return available[0], available[-1]


def start_server(command: list[str], core: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    assert process.stdout is not None
    url = json.loads(process.stdout.readline())["url"]
    return process, url


def pod_body(index: int) -> dict[str, Any]:
    """A pod as the simulated cluster writes one (same fields and size)."""
    from dl2.core import Architecture, JobSpec, Resources
    from dl2.kube.apiserver.sim import manifests

    spec = JobSpec("j", "resnet-50", 0.0, 10.0, 115, Resources(1, 4, 24), Resources(0, 4, 4), 16, 16, Architecture.PS)
    job = manifests.job(spec, f"job-{index:04d}-resnet-50", "bench")
    job["metadata"]["uid"] = "00000000-0000-4000-8000-000000000000"
    body = manifests.pod(spec, job, "worker", 0, None, "2026-01-01T00:00:00Z")
    body["metadata"]["labels"]["bench/sample"] = "yes" if index % 100 == 0 else "no"
    return body


def populate(url: str, namespace_path: str) -> None:
    http = urllib3.PoolManager(maxsize=1)
    headers = {"Content-Type": "application/json"}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}
    http.request("POST", f"{url}/api/v1/namespaces", body=json.dumps(namespace), headers=headers)
    for index in range(NUM_OBJECTS):
        done = http.request("POST", f"{url}{namespace_path}", body=json.dumps(pod_body(index)), headers=headers)
        if done.status not in (200, 201):
            raise RuntimeError(f"create failed: {done.status} {done.data[:200]!r}")


def rate(url: str, path: str, seconds: float, threads: int) -> tuple[float, float]:
    """(requests per second, MB per second) over `seconds` with `threads` keep-alive clients."""
    counts, sizes = [0] * threads, [0] * threads
    deadline = time.perf_counter() + seconds

    def client(slot: int) -> None:
        http = urllib3.PoolManager(maxsize=1)
        while time.perf_counter() < deadline:
            response = http.request("GET", url + path)
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status}")
            counts[slot] += 1
            sizes[slot] += len(response.data)

    started = time.perf_counter()
    workers = [threading.Thread(target=client, args=(slot,)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, sum(sizes) / elapsed / 1e6


def official_client_lists(url: str, seconds: float) -> float:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    core = client.CoreV1Api(client.ApiClient(configuration))
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        assert len(core.list_namespaced_pod("bench").items) == NUM_OBJECTS
        calls += 1
    return calls / (time.perf_counter() - started)


def request_rates(seconds: float) -> list[dict[str, Any]]:
    server_core, client_core = cores()
    os.sched_setaffinity(0, {client_core})
    pods = "/api/v1/namespaces/bench/pods"
    one = f"{pods}/job-1000-resnet-50-worker-0"
    get_and_list = [
        ("GET one pod", one, 1),
        ("GET one pod", one, 4),
        (f"LIST {NUM_OBJECTS} pods", pods, 1),
        (f"LIST {NUM_OBJECTS} pods", pods, 4),
    ]
    servers = [
        (
            "bare aiohttp, fixed body",
            [sys.executable, "-c", BARE_AIOHTTP],
            [("GET one pod", one, 1), ("GET one pod", one, 4)],
        ),
        (
            "dl2 cluster",
            [sys.executable, "-m", "dl2.cli.main", "cluster", "--kubeconfig", "work/bench.kubeconfig"],
            [*get_and_list, ("LIST, selector keeps 20", f"{pods}?labelSelector=bench%2Fsample%3Dyes", 1)],
        ),
        # each request to kmock's emulator takes about a second with 2,000 objects: one client
        ("kmock KubernetesEmulator", [sys.executable, "-c", KMOCK_SERVER], [c for c in get_and_list if c[2] == 1]),
    ]
    rows = []
    for server_name, command, cases in servers:
        process, url = start_server(command, server_core)
        try:
            if server_name == "dl2 cluster":
                populate(url, pods)  # the other two serve their objects from the start
            for name, path, threads in cases:
                per_second, megabytes = rate(url, path, seconds, threads)
                rows.append(
                    {
                        "server": server_name,
                        "request": name,
                        "threads": threads,
                        "requests_per_s": per_second,
                        "mb_per_s": megabytes,
                    }
                )
            if server_name == "dl2 cluster":
                rows.append(
                    {
                        "server": server_name,
                        "request": f"LIST {NUM_OBJECTS} pods, official client",
                        "threads": 1,
                        "requests_per_s": official_client_lists(url, seconds),
                        "mb_per_s": None,
                    }
                )
        finally:
            process.terminate()
            process.wait(20)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return rows


def slot_times(num_jobs: int, slots: int) -> dict[str, Any]:
    from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer
    from dl2.kube.apiserver.sim import simulate_cluster
    from dl2.kube.apiserver.sim.workloads import first_jobs
    from dl2.sim.config import SimConfig
    from dl2.workload.registry import load_workloads

    philly = first_jobs(load_workloads("philly")[0], num_jobs)
    burst = replace(philly, jobs=tuple(replace(j, spec=replace(j.spec, arrival_s=0.0)) for j in philly.jobs))
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as server:
        began = time.perf_counter()
        cluster = simulate_cluster(server, burst, SimConfig.realistic(seed=0))
        start_s = time.perf_counter() - began
        start_writes = server.store.rv
        walls, writes = [], []
        for _ in range(slots):
            if cluster.done:
                break
            before, began = server.store.rv, time.perf_counter()
            cluster.advance()
            walls.append(time.perf_counter() - began)
            writes.append(server.store.rv - before)
        pods = server.objects("v1/pods")
        status = cluster.status()
    return {
        "jobs": num_jobs,
        "start_s": start_s,
        "start_writes": start_writes,
        "slots": len(walls),
        "first_slot_s": walls[0],
        "first_slot_writes": writes[0],
        "median_slot_s": float(np.median(walls[1:])),
        "p99_slot_s": float(np.percentile(walls[1:], 99)),
        "median_writes_per_slot": float(np.median(writes[1:])),
        "pods": len(pods),
        "pending_pods": sum(p["status"]["phase"] == "Pending" for p in pods.values()),
        "finished_after": status["finished"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each request-rate measurement")
    parser.add_argument("--slots", type=int, default=20, help="simulated slots timed per size")
    parser.add_argument("--jobs", default="40,400,2000", help="workload sizes for the slot timing")
    parser.add_argument("--out", default="kube_apiserver.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    rates = request_rates(args.seconds)
    print_table(
        "requests per second (server on one core, client on the other)",
        ["server", "request", "client threads", "requests/s", "MB/s"],
        [
            [
                r["server"],
                r["request"],
                str(r["threads"]),
                f"{r['requests_per_s']:,.1f}",
                "" if r["mb_per_s"] is None else f"{r['mb_per_s']:,.1f}",
            ]
            for r in rates
        ],
    )
    os.sched_setaffinity(0, {cores()[0]})
    sizes = [slot_times(int(n), args.slots) for n in args.jobs.split(",")]
    print_table(
        f"simulated slots: Philly's first N jobs at once on 352 nodes, no controller ({args.slots} slots each)",
        [
            "jobs",
            "start (s)",
            "first slot (ms)",
            "median slot (ms)",
            "p99 slot (ms)",
            "writes/slot",
            "pods",
            "pending",
            "finished",
        ],
        [
            [
                str(s["jobs"]),
                f"{s['start_s']:.2f}",
                f"{1000 * s['first_slot_s']:.1f}",
                f"{1000 * s['median_slot_s']:.1f}",
                f"{1000 * s['p99_slot_s']:.1f}",
                f"{s['median_writes_per_slot']:.0f}",
                str(s["pods"]),
                str(s["pending_pods"]),
                str(s["finished_after"]),
            ]
            for s in sizes
        ],
    )
    path = write_json(
        args.out,
        {
            "environment": environment(),
            "request_rates": rates,
            "slots": sizes,
            "seconds": args.seconds,
            "objects": NUM_OBJECTS,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
