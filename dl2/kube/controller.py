"""The slot loop of `dl2 serve`: read the policy, observe, decide, record, act, report.

Each slot (`run_slot`), on the replica that holds the Lease:

1. observe: the managed jobs, the pods that hold nodes and the nodes, from the informers' caches (`cache`); on the
   simulated clock, once each cache is as fresh as the clock's barrier says (`dl2.kube.clock`); a job whose inputs
   are out of range is quarantined (`dl2.kube.quarantine`): left at its size, out of the policy's view, unrecorded;
2. complete the previous slot's records with the progress observed since and write them (`records`);
3. decide, unless this slot's journal exists (a restart within the slot): the policy's proposal (or the
   incumbent's, DL2 §7), clamped by the guardrails and the mode (`reconcile.plan`); the draft records and the
   targets go to the journal before anything is written to a job;
4. act: resize each job whose size differs from its target (`reconcile.changes`: desired against actual, so a
   resize that already happened is never repeated);
5. report: the SchedulerPolicy's status (observed generation, loaded model, conditions, counts, last slot), and
   Events on the objects concerned (`events`: resizes, quarantined jobs, promotions, fallbacks, refused specs,
   failed loads).

Between slots (`run`) the loop watches the SchedulerPolicy: a new spec is validated (a malformed one is refused
with a status condition and the last valid spec stays), its model version loaded and smoke-tested, and the status
written at once, so that a promotion is confirmed in seconds rather than at the next slot. Slots come from the
wall clock (`slot_s`) or, on a simulated cluster, from its clock ConfigMap (`dl2-system/dl2-clock`). A slot that
fails (the API or the record store, past their retries) is tried again a second later; after two failures in a row
the replica is not ready and its status says why (`SlotsFailing`, `dl2.kube.metrics.Health`) until a slot
completes, and `dl2_last_slot_completed_timestamp_seconds` stops moving (the `Dl2SlotsStalled` alert).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from dl2.core import ClusterSpec
from dl2.kube import clock as slot_clock
from dl2.kube.accelerator_labels import node_accelerator, unrecognised_note
from dl2.kube.actuate import Actuator, ApiCaller, ResizeRefused
from dl2.kube.cache import ClusterCache
from dl2.kube.events import EventRecorder, ObjectRef
from dl2.kube.exploration import explore, slot_draws
from dl2.kube.leader import LeaseElector
from dl2.kube.metrics import Health, Metrics
from dl2.kube.models import Loader, PolicyRuntime
from dl2.kube.observe import ManagedJob, RawCluster, Snapshot, SpecCache, progress_queries, snapshot
from dl2.kube.policy import API_VERSION, KIND, OFF, POLICIES, Mode, PolicyError, PolicySpec, parse_policy
from dl2.kube.progress_metrics import PrometheusProgress
from dl2.kube.quarantine import Cause, RecordedProgress
from dl2.kube.reconcile import JobState, Target, changes, may_resize, plan
from dl2.kube.records import DecisionLog, JournalEntry, SlotJournal, draft_records, recall
from dl2.kube.rest import CONFIGMAPS, Rest
from dl2.kube.settings import ControllerConfig
from dl2.sim.record_store import RecordStore
from dl2.sim.simulator import young_collections_only

log = logging.getLogger("dl2.serve")

RECORDED_MEMORY_SLOTS = 10_000
"""How long the controller remembers a job's last recorded progress after its last record (slots): a job
re-created under the same id within it is quarantined until it passes that progress (`Cause.PROGRESS_BACKWARDS`)."""

CRASH_POINTS = ("observed", "completed", "journaled", "resized-1", "resized-2", "resized-3", "acted", "status")
"""Where a test may have `dl2 serve` kill itself (`crash_at`): after each step of a slot, and after the first
three resizes of one."""


@dataclass(frozen=True, slots=True)
class SlotReport:
    slot: int
    mode: str
    jobs: int
    """Active jobs seen."""
    records: int
    """Records of the previous slot written now."""
    resizes: int
    decided: bool
    """False when the slot's decisions came from its journal (a restart), or nothing was decided."""
    fallback: str | None
    seconds: float
    api_calls: int
    """Requests of the slot (retries included): its resizes and the status; the reads come from the caches."""
    targets: tuple[Target, ...] = ()
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent per phase: observe (the reads; `wait` of it for the caches to reach the slot's versions),
    decide (incumbent and policy), record (records and journal), act (the resizes)."""


@dataclass(slots=True)
class _Conditions:
    """The status conditions, keeping each one's lastTransitionTime while its status stays."""

    since: dict[str, tuple[str, str]] = field(default_factory=dict)

    def build(self, wanted: list[tuple[str, bool, str, str]], generation: int) -> list[dict[str, Any]]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = []
        for kind, ok, reason, message in wanted:
            status = "True" if ok else "False"
            previous = self.since.get(kind)
            changed_at = previous[1] if previous is not None and previous[0] == status else now
            self.since[kind] = (status, changed_at)
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": changed_at,
                    "observedGeneration": generation,
                }
            )
        return conditions


class Controller:
    def __init__(
        self,
        api: Any,
        config: ControllerConfig,
        loader: Loader,
        metrics: Metrics | None = None,
        elector: LeaseElector | None = None,
    ) -> None:
        """`elector` None: this replica always leads (one replica, or a test)."""
        self.api = api
        self.config = config
        self.metrics = metrics or Metrics()
        self.rest = Rest(api, timeout_s=config.request_timeout_s)
        self.call = ApiCaller(self.metrics, seed=config.seed)
        self.actuator = Actuator(self.rest, self.call)
        self.cache = ClusterCache(self.rest, self.metrics, seed=config.seed, autoscalers=True)
        self.specs = SpecCache()
        self._writers = ThreadPoolExecutor(config.parallel_writes, thread_name_prefix="dl2-resize")
        self.events = EventRecorder(self.rest, config.identity)
        self.runtime = PolicyRuntime(loader, config.placer)
        self.log = DecisionLog(RecordStore(config.decision_log).child(config.cluster_name).location)
        self.elector = elector
        self.health = Health()
        self.policy: PolicySpec = OFF
        self.policy_error: str | None = "no SchedulerPolicy read yet"
        self.policy_exists = False
        """Whether the SchedulerPolicy object exists (there is no status to write without it)."""
        self.policy_ref = ObjectRef(API_VERSION, KIND, config.policy_name)
        self.observed_generation = 0
        self.last_report: SlotReport | None = None
        self.last_snapshot: Snapshot | None = None
        self.progress_source = PrometheusProgress(config.prometheus_url) if config.prometheus_url else None
        self.total_fallbacks = 0
        self._conditions = _Conditions()
        self._fallback: str | None = None
        self._reported_error: str | None = None
        self._reported_slot = -1
        """The last slot whose status was written, by this process or, as its status says, the previous leader
        (whose Events of that slot were sent: a slot's Events are held until its end)."""
        self._announced: tuple[int, set[str]] = (-1, set())
        """A slot and the jobs this process sent a `Resized` Event about in it."""
        self._stall_reported = ""
        """When the stall the status last reported began (`Health.failing_since`): one status write per stall."""
        self.metrics.slot_length.set(config.slot_s)
        self._recorded = RecordedProgress()
        """Each job's progress in its last decision records: records never go back."""
        self._recalled = False
        """Whether `_recorded` has been seeded from the journals a previous run left."""
        self._accelerators_seen: ClusterSpec | None = None
        """The cluster whose nodes' accelerator labels were last read (`_report_accelerators`)."""
        self._accelerators_noted: set[tuple[str, str]] = set()
        """(node, product) of the unknown GPU products warned about."""
        self._quarantine_noted: dict[str, Cause] = {}
        """`namespace/name` -> the cause its last `Quarantined` Event gave (one Event per distinct cause)."""

    # -- leadership and the policy ----------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def refresh_policy(self, obj: dict[str, Any] | None) -> None:
        """Adopt a SchedulerPolicy object: validate it (a bad one is refused, the last valid spec stays) and make
        sure its model version is loaded."""
        self.policy_exists = obj is not None
        if obj is None:
            self.policy, self.policy_error = OFF, f"SchedulerPolicy {self.config.policy_name} not found"
        else:
            self.policy_ref = ObjectRef.of(obj)
            self.observed_generation = int((obj.get("metadata") or {}).get("generation") or 0)
            try:
                self.policy, self.policy_error = parse_policy(obj), None
            except PolicyError as error:
                self.policy_error = str(error)
                log.warning("refused SchedulerPolicy %s: %s", self.config.policy_name, error)
                self._warn("InvalidSpec", "Refuse", f"{error}; the last valid spec keeps running")
        policy = self.policy
        if policy.mode is not Mode.OFF and policy.model_version is not None:
            before, attempts = self.runtime.current, self.runtime.attempts
            self.runtime.ensure(policy.model_name, policy.model_version)
            current = self.runtime.current
            if current is not before and current is not None:
                self.metrics.model_loads.labels("loaded").inc()
                log.info("loaded %s v%s", policy.model_name, policy.model_version)
                was = f" (was v{before.version})" if before is not None else ""
                self._event("Normal", "Promoted", "Load", f"serving {current.name} v{current.version}{was}")
            elif self.runtime.attempts != attempts:
                self.metrics.model_loads.labels("failed").inc()
                log.warning("model load failed: %s", self.runtime.load_error)
                self._warn("ModelLoadFailed", "Load", str(self.runtime.load_error))
        current = self.runtime.current
        self.metrics.model_version.clear()
        if current is not None:
            self.metrics.model_version.labels(current.name, current.version).set(1)
        self.health.ready = self.policy_error is None and (policy.mode is Mode.OFF or self._model_ready())
        self.health.reason = "ready" if self.health.ready else (self.policy_error or self.runtime.load_error or "")

    def _event(self, kind: str, reason: str, action: str, note: str, regarding: ObjectRef | None = None) -> None:
        if self.is_leader() and (regarding is not None or self.policy_exists):
            self.events.event(regarding or self.policy_ref, kind, reason, action, note)

    def _warn(self, reason: str, action: str, note: str) -> None:
        """A Warning on the policy, once per distinct problem (not again at every retry)."""
        if note != self._reported_error:
            self._reported_error = note
            self._event("Warning", reason, action, note)

    def _model_ready(self) -> bool:
        current, policy = self.runtime.current, self.policy
        return current is not None and (current.name, current.version) == (policy.model_name, policy.model_version)

    def take_over(self, obj: dict[str, Any] | None) -> None:
        """Adopt what the previous leader (or this replica's previous process) last reported on the SchedulerPolicy
        `obj`: its fallback, so that a slot the model decides again says `Recovered` (its `Fallback` Event would
        otherwise never be followed), and its last slot, whose Events it sent. Called on becoming leader."""
        self.metrics.last_slot_completed.set_to_current_time()  # a stall counts from here
        status = (obj or {}).get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Fallback" and condition.get("status") == "True":
                self._fallback = str(condition.get("message") or "fallback")
        last = status.get("lastSlot")
        if isinstance(last, int):
            self._reported_slot = max(self._reported_slot, last)

    # -- one slot ---------------------------------------------------------------------------------------------

    def _crash(self, point: str, slot: int) -> None:
        if (point, slot) in self.config.crash_at:
            log.warning("crash point %s of slot %d: SIGKILL", point, slot)
            os.kill(os.getpid(), signal.SIGKILL)

    def run_slot(
        self, slot: int, time_s: float, slot_s: float, barrier: dict[str, int] | None = None
    ) -> SlotReport | None:
        """Run one slot (None if this replica does not lead); `barrier`: the versions the caches must reflect
        (the simulated clock's), to which the controller adds those of its own writes."""
        if not self.is_leader():
            return None
        self.events.hold()
        try:
            # no automatic collection within a slot: a full one scans the informer caches (0.6 s at 2,000 jobs) and
            # would land in whichever slot crosses the threshold; re-enabled after, it runs in the idle time
            with young_collections_only():
                return self._run_slot(slot, time_s, slot_s, barrier)
        finally:
            self.events.release()

    def _measured_progress(self, raw: RawCluster) -> dict[tuple[str, str], float]:
        """Epochs from the jobs' own metrics (`dl2.io/progress-query`), where a Prometheus is configured."""
        if self.progress_source is None:
            return {}
        last = self.last_snapshot
        active = {(job.namespace, job.name) for job in last.jobs} if last is not None else set()
        failures = self.progress_source.failures
        measured = self.progress_source.read(progress_queries(raw, active))
        self.metrics.progress_query_failures.inc(self.progress_source.failures - failures)
        return measured

    def _recorded_progress(self, slot: int) -> dict[str, float]:
        """Job id -> its progress in its last decision record of a slot before `slot` (seeded, after a restart, from
        the journals the previous run left; never the slot's own, which a replay finds: `RecordedProgress`);
        entries older than `RECORDED_MEMORY_SLOTS` are forgotten."""
        if not self._recalled:
            self._recalled = True
            recall(self._recorded, self.log)
        self._recorded.forget_before(slot - RECORDED_MEMORY_SLOTS)
        return self._recorded.before(slot)

    def _report_accelerators(self, raw: RawCluster, snap: Snapshot) -> None:
        """A Warning Event on each node whose GPU product label dl2 does not know (its GPUs are taken for the
        reference accelerator: `accelerator_labels`), once per node and product; the nodes are read again only
        when they change (observing then builds a new cluster)."""
        if snap.cluster is self._accelerators_seen:
            return
        self._accelerators_seen = snap.cluster
        noted: set[tuple[str, str]] = set()
        for node in raw.nodes:
            metadata = node.get("metadata") or {}
            _, product = node_accelerator(metadata.get("labels") or {})
            if product is None:
                continue
            name = str(metadata.get("name", ""))
            noted.add((name, product))
            if (name, product) not in self._accelerators_noted:
                note = unrecognised_note(name, product)
                log.warning("%s", note)
                regarding = ObjectRef("v1", "Node", name, "", str(metadata.get("uid") or ""))
                self._event("Warning", "UnknownAccelerator", "Observe", note, regarding)
        self._accelerators_noted = noted

    def _report_quarantine(self, snap: Snapshot) -> None:
        """The quarantined jobs on the gauge, and a Warning Event on each job once per distinct cause (not every
        slot); nothing while the mode is off."""
        self.metrics.quarantined.clear()
        for cause in Cause:
            count = sum(q.cause is cause for q in snap.quarantined)
            if count:
                self.metrics.quarantined.labels(cause.value).set(count)
        noted: dict[str, Cause] = {}
        for job in snap.quarantined:
            noted[job.key] = job.cause
            if self.policy.mode is not Mode.OFF and self._quarantine_noted.get(job.key) is not job.cause:
                note = f"left at its size, not decided, not recorded: {job.cause.value}: {job.message}"
                self._event("Warning", "Quarantined", "Decide", note, ObjectRef.of(job.obj))
        self._quarantine_noted = noted

    def _run_slot(self, slot: int, time_s: float, slot_s: float, barrier: dict[str, int] | None) -> SlotReport | None:
        started, calls = time.perf_counter(), self.call.calls
        self.health.beat()
        wanted = dict(self.rest.written)
        for resource, version in (barrier or {}).items():
            wanted[resource] = max(wanted.get(resource, 0), version)
        self.cache.start()
        self.cache.wait_for(wanted, self.config.cache_timeout_s)
        waited = time.perf_counter() - started
        raw = self.cache.read()
        measured = self._measured_progress(raw)
        recorded = self._recorded_progress(slot)
        last_slot = self._recorded.at(slot - 1)
        snap = snapshot(raw, time_s, slot, slot_s, self.config.cluster_name, self.specs, measured, recorded, last_slot)
        phases = {"observe": time.perf_counter() - started, "wait": waited, "decide": 0.0}
        mark = time.perf_counter()
        self.last_snapshot = snap
        self._crash("observed", slot)
        if not self.is_leader():
            return None
        placed = {job.spec.job_id: job.allocation for job in snap.view.jobs}
        written, dropped = self.log.complete(slot, snap.progress, placed, snap.cluster)
        self.metrics.records_written.inc(written)
        self.metrics.records_dropped.inc(dropped)
        if snap.cluster.num_nodes:
            self.log.describe_cluster(snap.cluster)
        self._report_accelerators(raw, snap)
        self._report_quarantine(snap)
        self._crash("completed", slot)
        policy = self.policy
        decided, fallback, resizes = False, None, 0
        journal = self.log.journal(slot) if policy.mode is not Mode.OFF else None
        if policy.mode is not Mode.OFF and journal is None and snap.jobs:
            decide_started = time.perf_counter()
            journal, fallback = self._decide(snap, policy, slot)
            phases["decide"] = time.perf_counter() - decide_started
            if not self.is_leader():
                return None
            journal = self.log.write_journal(journal)
            decided = True
            self.metrics.decisions.labels(policy.mode.value).inc(len(journal.entries))
            self.metrics.fallback_active.set(1 if fallback else 0)
            if fallback:
                self.total_fallbacks += 1
                self.metrics.fallbacks.labels(fallback.split(":", 1)[0]).inc()
            if fallback != self._fallback:
                if fallback:
                    self._event(
                        "Warning", "Fallback", "Decide", f"the incumbent {policy.incumbent} decides: {fallback}"
                    )
                elif self._fallback:
                    self._event("Normal", "Recovered", "Decide", f"{policy.model_ref} decides again")
                self._fallback = fallback
        self._crash("journaled", slot)
        phases["record"] = time.perf_counter() - mark - phases["decide"]
        mark = time.perf_counter()
        if journal is not None and policy.mode in (Mode.CANARY, Mode.ACTIVE):
            resizes = self._act(snap, journal, policy, slot, replayed=not decided)
        phases["act"] = time.perf_counter() - mark
        self._crash("acted", slot)
        seconds = time.perf_counter() - started
        self.metrics.slot_seconds.observe(seconds)
        if seconds > slot_s:
            self.metrics.slot_overruns.inc()
        self.metrics.last_slot.set(slot)
        targets = tuple(journal.targets) if journal is not None else ()
        if fallback is None and journal is not None and not decided:
            proposer = journal.entries[0].record.model_version if journal.entries else ""
            fallback = (
                f"{proposer} decided (slot restored from its journal)" if proposer.startswith("incumbent/") else None
            )
        report = SlotReport(
            slot, policy.mode.value, len(snap.jobs), written, resizes, decided, fallback, seconds,
            self.call.calls - calls, targets, phases,
        )  # fmt: skip
        self.last_report = report
        self.publish_status(slot_done=True)
        self._slot_completed(slot, slot_s)
        report = self.last_report = replace(report, api_calls=self.call.calls - calls)  # the status patch too
        self._crash("status", slot)
        return report

    def _slot_completed(self, slot: int, slot_s: float) -> None:
        """A slot ran to its end, its status written: any stall is over."""
        self.health.clear_failures()
        self._reported_slot = max(self._reported_slot, slot)
        self.metrics.last_slot_completed.set_to_current_time()
        self.metrics.slot_length.set(slot_s)

    def _states(self, snap: Snapshot, policy: PolicySpec) -> list[JobState]:
        return [
            JobState(
                job.job_id,
                job.replicas,
                view.spec.max_workers,
                view.spec.max_ps,
                job.kueue,
                policy.canary.contains(job.namespace, job.labels),
                job.resized_slot,
                job.size_owner is not None,
            )
            for job, view in zip(snap.jobs, snap.view.jobs, strict=True)
        ]

    def _decide(self, snap: Snapshot, policy: PolicySpec, slot: int) -> tuple[SlotJournal, str | None]:
        decision = self.runtime.decide(snap.view, policy.incumbent)
        proposed = [decision.proposal.get(v.spec.job_id) for v in snap.view.jobs]
        proposals = [(allocation.num_workers, allocation.num_ps) for allocation in proposed]
        states = self._states(snap, policy)
        targets = plan(states, proposals, policy.mode, policy.guardrails, slot)
        propensities: dict[str, float] = {}
        if policy.mode is Mode.CANARY and policy.canary.explore > 0 and not decision.fallback:
            draws = slot_draws(self.config.cluster_name, slot, len(targets))
            targets, propensities = explore(states, targets, policy.guardrails, policy.canary.explore, draws)
        records = draft_records(
            snap.view, decision.incumbent, decision.proposal, targets, policy.mode.value, decision.proposer,
            policy.incumbent, self.config.cluster_name, propensities, decision.attribution,
        )  # fmt: skip
        entries = tuple(
            JournalEntry(record, job.namespace, job.name, target)
            for record, job, target in zip(records, snap.jobs, targets, strict=True)
        )
        for record in records:
            self._recorded.note(record.job_id, record.progress_epochs, slot)
        if decision.fallback:
            log.warning("slot %d: the incumbent %s decides: %s", slot, policy.incumbent, decision.fallback)
        return SlotJournal(slot, entries), decision.fallback

    def _act(self, snap: Snapshot, journal: SlotJournal, policy: PolicySpec, slot: int, replayed: bool) -> int:
        """Resize the jobs whose size is not their target yet, if the (current) mode still lets it; `replayed`:
        the journal is another process's (a restart, a failover), whose lost `Resized` Events are sent too."""
        actual = {job.job_id: job.replicas for job in snap.jobs}
        jobs = {job.job_id: job for job in snap.jobs}
        if self._announced[0] != slot:
            self._announced = (slot, set())
        if replayed:
            self._announce_replayed(journal, jobs, policy, slot)
        states = {state.job_id: state for state in self._states(snap, policy)}
        wanted = [
            target
            for target in changes(journal.targets, actual)
            # the mode may have narrowed since the slot was decided (the kill switch is `mode: shadow`)
            if may_resize(states[target.job_id], policy.mode) is None
        ]

        def resize(target: Target) -> Target | None:
            if not self.is_leader():
                return None  # deposed meanwhile: write nothing more
            job = jobs[target.job_id]
            try:
                self.actuator.resize(job, target.workers, target.ps, slot)
            except ResizeRefused as error:  # not bound in its namespace, or not admitted: the others still resize
                log.warning("slot %d: resize refused: %s", slot, error)
                self._event("Warning", "ResizeRefused", "Resize", f"slot {slot}: {error}", ObjectRef.of(job.obj))
                return None
            return target

        # the resizes of different jobs are independent: several in flight at once, as many as the API allows
        done = 0
        futures = [self._writers.submit(resize, target) for target in wanted]
        for future in as_completed(futures):
            target = future.result()
            if target is None:
                continue
            job = jobs[target.job_id]
            self.metrics.resizes.labels(job.obj.get("kind", "")).inc()
            self._resized_event(job, job.replicas, target, policy, slot)
            done += 1
            self._crash(f"resized-{done}", slot)
        return done

    def _resized_event(
        self, job: ManagedJob, before: tuple[int, int], target: Target, policy: PolicySpec, slot: int
    ) -> None:
        note = f"slot {slot}: {before[0]} -> {target.workers} workers"
        note += f", {before[1]} -> {target.ps} PS" if target.ps or before[1] else ""
        self._event("Normal", "Resized", "Resize", f"{note} ({policy.mode.value}, {policy.model_ref})",
                    ObjectRef.of(job.obj))  # fmt: skip
        self._announced[1].add(target.job_id)

    def _announce_replayed(
        self, journal: SlotJournal, jobs: dict[str, ManagedJob], policy: PolicySpec, slot: int
    ) -> None:
        """The `Resized` Events of the resizes another process made in this slot before it stopped: a slot's
        Events are held until its end, so they died with it, unless its status reports the slot done. A job counts
        when it holds its target, carries this slot's stamp, and this process has not announced it."""
        if slot <= self._reported_slot:
            return
        for entry in journal.entries:
            target, job = entry.target, jobs.get(entry.target.job_id)
            before = (entry.record.held_workers, entry.record.held_ps)
            if job is None or job.resized_slot != slot or job.replicas != target.size or before == target.size:
                continue
            if target.job_id not in self._announced[1]:
                self._resized_event(job, before, target, policy, slot)

    # -- status -----------------------------------------------------------------------------------------------

    def status(self, slot_done: bool = False) -> dict[str, Any]:
        """The SchedulerPolicy status this replica would write now; `slot_done`: at the end of a slot, which ends
        a stall of the slot loop (`Health.stalled`)."""
        policy, runtime, report, snap = self.policy, self.runtime, self.last_report, self.last_snapshot
        current = runtime.current
        spec_ok = self.policy_error is None
        needs_model = policy.mode is not Mode.OFF
        model_ok = not needs_model or self._model_ready()
        if not needs_model:
            model_condition = (True, "NotNeeded", "mode off: no model runs")
        elif model_ok and current is not None:
            model_condition = (True, "Loaded", f"{current.name} v{current.version} loaded at {current.loaded_at}")
        elif runtime.load_error:
            kept = f"; still serving {current.name} v{current.version}" if current is not None else ""
            model_condition = (False, "LoadFailed", runtime.load_error + kept)
        else:
            model_condition = (False, "Loading", f"loading {policy.model_ref}")
        fallback = report.fallback if report is not None else self._fallback  # the previous leader's, until a slot
        stalled = None if slot_done else self.health.stalled()
        ready = spec_ok and model_ok and stalled is None
        ready_reason = "Ready" if ready else ("InvalidSpec" if not spec_ok else model_condition[1])
        ready_message = "serving" if ready else (self.policy_error or model_condition[2])
        if stalled is not None:  # first: while slots fail nothing is decided, recorded or resized at all
            ready_reason, ready_message = "SlotsFailing", stalled[:1000]
        conditions = self._conditions.build(
            [
                ("Ready", ready, ready_reason, ready_message),
                ("SpecValid", spec_ok, "Valid" if spec_ok else "InvalidSpec", self.policy_error or "spec accepted"),
                ("ModelLoaded", *model_condition),
                (
                    "Fallback",
                    fallback is not None,
                    "Incumbent" if fallback else "Model",
                    fallback or "the model decides",
                ),
            ],
            self.observed_generation,
        )
        kueue = [job.key for job in snap.jobs if job.kueue] if snap is not None else []
        owned = [f"{job.key}: {job.size_owner}" for job in snap.jobs if job.size_owner] if snap is not None else []
        unknown = (
            [f"{job.key}: {job.unknown_model!r} not in the catalogue, profiled as {view.spec.model!r}"
             for job, view in zip(snap.jobs, snap.view.jobs, strict=True) if job.unknown_model]
            if snap is not None else []
        )  # fmt: skip
        counts = {
            "jobs": len(snap.jobs) if snap is not None else 0,
            "kueueManaged": len(kueue),
            "sizeOwnedElsewhere": len(owned),
            "unknownModels": len(unknown),
            "quarantined": len(snap.quarantined) if snap is not None else 0,
            "records": report.records if report is not None else 0,
            "resizes": report.resizes if report is not None else 0,
            "fallbackSlots": self.total_fallbacks,
        }
        if snap is not None and policy.mode is Mode.CANARY:
            counts["inCanary"] = sum(policy.canary.contains(job.namespace, job.labels) for job in snap.jobs)
        status: dict[str, Any] = {
            "observedGeneration": self.observed_generation,
            "mode": policy.mode.value,
            "activeModel": policy.model_ref,
            "loadedModel": (
                {"name": current.name, "version": current.version, "loadedAt": current.loaded_at} if current else None
            ),
            "leader": self.config.identity,
            "conditions": conditions,
            "counts": counts,
            "kueueJobs": kueue[:20],
            "sizeOwnedJobs": owned[:20],
            "unknownModelJobs": unknown[:20],
            "quarantinedJobs": [job.describe() for job in snap.quarantined[:20]] if snap is not None else [],
        }
        if report is not None:
            status["lastSlot"] = report.slot
            status["lastSlotSeconds"] = round(report.seconds, 4)
        return status

    def publish_status(self, slot_done: bool = False) -> None:
        if self.is_leader() and self.policy_exists:
            self.actuator.patch_status(self.config.policy_name, self.status(slot_done))

    def _slot_failed(self, error: Exception) -> None:
        """Count a failed attempt of the slot loop; once it stalls, say so on the SchedulerPolicy, once per stall
        (best effort: the API server may be what fails, and then `/readyz` is what tells)."""
        self.metrics.slot_failures.inc()
        self.health.slot_failed(error)
        if self.health.stalled() is None or self._stall_reported == self.health.failing_since:
            return
        try:
            self.publish_status()
            self._stall_reported = self.health.failing_since
        except Exception as status_error:  # the API is down too: try again at the next failure
            log.warning("status not written: %s: %s", type(status_error).__name__, status_error)

    # -- the loop ---------------------------------------------------------------------------------------------

    def current_slot(self, clock: dict[str, Any] | None) -> slot_clock.SlotClock | None:
        """The slot now, from the wall clock or the simulated clock's ConfigMap (with its barrier)."""
        if self.config.clock == "wall":
            slot_s = self.config.slot_s
            slot = int(time.time() // slot_s)
            return slot_clock.SlotClock(slot, slot * slot_s, slot_s)
        return slot_clock.parse_clock((clock or {}).get("data"))

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set: watch the policy (and the clock), run each slot once, as the leader."""
        from dl2.kube.informer import Informer

        wake = threading.Event()
        policy_changed = threading.Event()

        def on_policy() -> None:
            policy_changed.set()
            wake.set()

        name = self.config.policy_name
        policy_watch = Informer(
            self.rest, POLICIES, self.metrics, field_selector=f"metadata.name={name}", on_change=on_policy
        ).start()
        clock_watch = None
        if self.config.clock == "cluster":
            clock_watch = Informer(
                self.rest, CONFIGMAPS, self.metrics, namespace=self.config.clock_namespace,
                field_selector=f"metadata.name={self.config.clock_name}", on_change=wake.set,
            ).start()  # fmt: skip
        if self.elector is not None:
            self.elector.start()
        self.events.start()
        done_slot: int | None = None
        seen_generation: int | None = None
        led = False
        try:
            policy_watch.wait_synced(10)
            self.cache.start(self.config.cache_timeout_s)
            while not stop.is_set():
                self.health.beat()
                leader = self.is_leader()
                self.metrics.leader.set(1 if leader else 0)
                if leader and not led:
                    done_slot = None  # a new leader runs the current slot (its journal makes that safe)
                    self.take_over(policy_watch.get(name))
                elif led and not leader:
                    self.health.clear_failures()  # a standby runs no slot: its readiness is the API's and the model's
                led = leader
                self.health.unreachable = self.elector.unreachable() if self.elector is not None else None
                try:
                    latest = policy_watch.get(name)
                    if policy_changed.is_set():
                        policy_changed.clear()
                        generation = int(((latest or {}).get("metadata") or {}).get("generation") or -1)
                        if generation != seen_generation:  # a new spec (status writes, ours too, do not count)
                            seen_generation = generation
                            self.refresh_policy(latest)
                            self.publish_status()
                    elif self.runtime.load_error is not None:
                        self.refresh_policy(latest)  # retry the wanted version (after retry_s)
                    clock_key = f"{self.config.clock_namespace}/{self.config.clock_name}"
                    clock = clock_watch.get(clock_key) if clock_watch is not None else None
                    now = self.current_slot(clock)
                    if now is not None:
                        self.metrics.slot_length.set(now.slot_s)
                    if now is not None and now.slot != done_slot and leader:
                        report = self.run_slot(now.slot, now.time_s, now.slot_s, dict(now.resource_versions))
                        if report is not None:
                            done_slot = now.slot
                            log.info(
                                "slot %d: %d jobs, %d resizes, %d records, %.3f s%s", report.slot, report.jobs,
                                report.resizes, report.records, report.seconds,
                                f", fallback: {report.fallback}" if report.fallback else "",
                            )  # fmt: skip
                except Exception as error:  # the API or the record store failed past its retries: try again shortly
                    log.warning("slot loop: %s: %s", type(error).__name__, error)
                    self._slot_failed(error)
                    stop.wait(1.0)
                    continue
                wake.wait(self._idle_s())
                wake.clear()
        finally:
            policy_watch.stop()
            if clock_watch is not None:
                clock_watch.stop()
            self.cache.stop()
            self.events.stop()
            if self.elector is not None:
                self.elector.stop(release=True)

    def _idle_s(self) -> float:
        if self.config.clock == "wall":
            slot_s = self.config.slot_s
            return max(0.05, min(1.0, slot_s - time.time() % slot_s))
        return 1.0
