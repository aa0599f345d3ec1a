"""The controller's pure parts by hand: guardrails and modes (`reconcile`), the SchedulerPolicy parser, and the
decision journal that makes a slot's records exactly-once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.kube.policy import Guardrails, Mode, PolicyError, parse_policy
from dl2.kube.reconcile import JobState, Reason, Target, bounds, changes, clamp, clamp_role, plan

FREE = Guardrails()


def job(job_id="j", current=(2, 1), max_workers=8, max_ps=4, **kwargs):
    return JobState(job_id, current, max_workers, max_ps, **kwargs)


# -- reconcile --------------------------------------------------------------------------------------------


def test_bounds_take_the_tighter_limit_and_a_missing_role_stays_zero():
    assert bounds(8, FREE) == (0, 8)
    assert bounds(8, Guardrails(min_replicas=1, max_replicas=4)) == (1, 4)
    assert bounds(2, Guardrails(min_replicas=3)) == (2, 2)  # the job's own limit wins over the floor
    assert bounds(0, Guardrails(min_replicas=1)) == (0, 0)  # an all-reduce job has no PS, whatever the floor


@pytest.mark.parametrize(
    ("proposed", "current", "guardrails", "expected"),
    [
        (6, 2, FREE, 6),
        (12, 2, FREE, 8),  # the job's maximum
        (6, 2, Guardrails(max_replicas=4), 4),
        (6, 2, Guardrails(max_step_per_slot=1), 3),
        (0, 5, Guardrails(max_step_per_slot=2), 3),
        (0, 5, Guardrails(min_replicas=1), 1),
        (1, 7, Guardrails(max_replicas=3, max_step_per_slot=2), 5),  # above the bound: steps down to it
    ],
)
def test_clamp_role_by_hand(proposed, current, guardrails, expected):
    assert clamp_role(proposed, current, 8, guardrails) == expected


def test_cooldown_keeps_a_recently_resized_job_as_it_is():
    guardrails = Guardrails(cooldown_slots=2)
    resized = job(resized_slot=10)
    assert clamp(resized, (4, 2), guardrails, 11) == Target("j", 2, 1, Reason.COOLDOWN)
    assert clamp(resized, (4, 2), guardrails, 12) == Target("j", 2, 1, Reason.COOLDOWN)
    assert clamp(resized, (4, 2), guardrails, 13) == Target("j", 4, 2, Reason.PROPOSED)
    assert clamp(resized, (2, 1), guardrails, 11).reason is Reason.UNCHANGED


def test_plan_follows_the_mode_the_scope_and_kueue():
    jobs = [job("a"), job("b", in_scope=False), job("c", kueue=True)]
    proposals = [(4, 2), (4, 2), (4, 2)]
    assert [t.reason for t in plan(jobs, proposals, Mode.SHADOW, FREE, 0)] == [Reason.SHADOW] * 3
    assert [t.size for t in plan(jobs, proposals, Mode.SHADOW, FREE, 0)] == [(2, 1)] * 3
    canary = plan(jobs, proposals, Mode.CANARY, FREE, 0)
    assert [(t.size, t.reason) for t in canary] == [
        ((4, 2), Reason.PROPOSED), ((2, 1), Reason.OUT_OF_SCOPE), ((2, 1), Reason.KUEUE),
    ]  # fmt: skip
    active = plan(jobs, proposals, Mode.ACTIVE, FREE, 0)
    assert [t.size for t in active] == [(4, 2), (4, 2), (2, 1)]


def test_a_job_sized_elsewhere_is_left_alone_in_every_mode():
    jobs = [job("a"), job("b", size_owned=True)]
    for mode in (Mode.CANARY, Mode.ACTIVE):
        targets = plan(jobs, [(4, 2), (4, 2)], mode, FREE, 0)
        assert [(t.size, t.reason) for t in targets] == [((4, 2), Reason.PROPOSED), ((2, 1), Reason.SIZE_OWNER)]


def test_plan_changes_at_most_max_jobs_in_workload_order():
    jobs = [job(name) for name in "abcd"]
    proposals = [(3, 1), (2, 1), (5, 1), (1, 1)]
    targets = plan(jobs, proposals, Mode.ACTIVE, Guardrails(max_jobs_changed_per_slot=2), 0)
    assert [(t.job_id, t.size, t.reason) for t in targets] == [
        ("a", (3, 1), Reason.PROPOSED),
        ("b", (2, 1), Reason.UNCHANGED),  # no change: does not count
        ("c", (5, 1), Reason.PROPOSED),
        ("d", (2, 1), Reason.MAX_CHANGES),
    ]


def test_changes_compare_desired_with_actual_so_a_second_pass_asks_nothing():
    targets = [
        Target("a", 3, 1, Reason.PROPOSED),
        Target("b", 2, 1, Reason.UNCHANGED),
        Target("c", 1, 0, Reason.CLAMPED),
    ]
    actual = {"a": (2, 1), "b": (2, 1), "c": (4, 0)}
    assert [t.job_id for t in changes(targets, actual)] == ["a", "c"]
    applied = {**actual, "a": (3, 1), "c": (1, 0)}
    assert changes(targets, applied) == []  # after the resizes (or a restart after them): nothing to do
    assert changes(targets, {"a": (2, 1)}) == [targets[0]]  # jobs gone from the cluster are left out


@given(
    proposed=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    current=st.tuples(st.integers(0, 20), st.integers(0, 20)),
    max_workers=st.integers(1, 16),
    max_ps=st.integers(0, 8),
    low=st.integers(0, 4),
    high=st.one_of(st.none(), st.integers(4, 12)),
    step=st.one_of(st.none(), st.integers(1, 4)),
)
def test_a_clamped_target_moves_at_most_one_step_towards_the_bounds(
    proposed, current, max_workers, max_ps, low, high, step
):
    guardrails = Guardrails(min_replicas=low, max_replicas=high, max_step_per_slot=step)
    target = clamp(job(current=current, max_workers=max_workers, max_ps=max_ps), proposed, guardrails, 0)
    for size, before, limit in ((target.workers, current[0], max_workers), (target.ps, current[1], max_ps)):
        lo, hi = bounds(limit, guardrails)
        if step is not None:
            assert abs(size - before) <= step
        if step is None or lo - step <= before <= hi + step:
            assert lo <= size <= hi  # reachable in one step: within the bounds
        else:
            assert (size > before) == (before < lo)  # otherwise one step closer


# -- the SchedulerPolicy ------------------------------------------------------------------------------------


def obj(**spec):
    return {"metadata": {"name": "default", "generation": 4}, "spec": spec}


def test_a_full_policy_parses():
    policy = parse_policy(
        obj(
            mode="canary",
            model={"name": "dl2-policy", "version": "7"},
            incumbent="tiresias",
            canary={"namespaces": ["team-a"], "jobSelector": {"matchLabels": {"dl2.io/canary": "true"}}},
            guardrails={
                "minReplicas": 1,
                "maxReplicas": 16,
                "maxStepPerSlot": 2,
                "cooldownSlots": 3,
                "maxJobsChangedPerSlot": 10,
            },
        )
    )
    assert (policy.mode, policy.model_ref, policy.incumbent, policy.generation) == (
        Mode.CANARY, "dl2-policy/7", "tiresias", 4,
    )  # fmt: skip
    assert policy.guardrails == Guardrails(1, 16, 2, 3, 10)
    assert policy.canary.contains("team-a", {}) and policy.canary.contains("team-b", {"dl2.io/canary": "true"})
    assert not policy.canary.contains("team-b", {"dl2.io/canary": "false"})


def test_off_needs_no_model_and_yaml_s_false_is_off():
    assert parse_policy(obj(mode="off")).model_version is None
    assert parse_policy(obj(mode=False)).mode is Mode.OFF
    assert parse_policy(obj(mode="shadow", model={"version": 3})).model_version == "3"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "turbo", "model": {"version": "1"}}, "spec.mode: unknown mode 'turbo'"),
        ({"mode": "active"}, "spec.model.version: missing"),
        ({"mode": "active", "model": {"version": "latest"}}, "spec.model.version: expected a registry version"),
        ({"mode": "active", "model": {"version": "0"}}, "spec.model.version: expected a registry version"),
        ({"mode": "active", "model": {"version": "1"}, "guardrails": {"minReplicas": -1}},
         "spec.guardrails.minReplicas: must not be negative"),
        ({"mode": "active", "model": {"version": "1"}, "guardrails": {"maxReplicas": 1, "minReplicas": 2}},
         "spec.guardrails.maxReplicas: 1 is below minReplicas 2"),
        ({"mode": "active", "model": {"version": "1"}, "guardrails": {"maxStepPerSlot": 0}},
         "spec.guardrails.maxStepPerSlot: must be at least 1"),
        ({"mode": "active", "model": {"version": "1"}, "guardrails": {"cooldown": 1}},
         "spec.guardrails.cooldown: unknown field"),
        ({"mode": "canary", "model": {"version": "1"}}, "spec.canary: canary mode needs namespaces"),
        ({"mode": "canary", "model": {"version": "1"}, "canary": {"namespaces": ["a"], "explore": 0.8}},
         "spec.canary.explore: expected a probability from 0 to 0.5"),
        ({"mode": "canary", "model": {"version": "1"}, "canary": {"namespaces": ["a"], "explore": True}},
         "spec.canary.explore: expected a probability"),
        ({"mode": "active", "model": {"version": "1"}, "incumbent": "magic"}, "spec.incumbent: unknown heuristic"),
        ({"mode": "active", "model": {"version": "1"}, "slotSeconds": 60}, "spec.slotSeconds: unknown field"),
    ],
)  # fmt: skip
def test_a_malformed_policy_is_refused_naming_the_field(spec, message):
    with pytest.raises(PolicyError, match="^" + message.replace("(", r"\(")):
        parse_policy(obj(**spec))


ODD = st.sampled_from([None, True, False, -1, 0, 1, 3, 2.5, "", "x", "1", "07", [], {}, ["team-a"]])
SPECS = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["off", "shadow", "canary", "active", "turbo", False, None, 1]),
        "model": st.one_of(ODD, st.fixed_dictionaries({}, optional={"name": ODD, "version": ODD, "alias": ODD})),
        "incumbent": st.sampled_from(["drf", "tiresias", "magic", None, 3]),
        "guardrails": st.one_of(
            ODD,
            st.dictionaries(
                st.sampled_from(
                    ["minReplicas", "maxReplicas", "maxStepPerSlot", "cooldownSlots", "maxJobsChangedPerSlot", "step"]
                ),
                ODD,
            ),
        ),
        "canary": st.one_of(
            ODD,
            st.fixed_dictionaries({}, optional={"namespaces": ODD, "jobSelector": ODD, "labels": ODD, "explore": ODD}),
        ),
        "slotSeconds": ODD,
    },
)


@settings(max_examples=300, deadline=None)
@given(SPECS)
def test_any_spec_parses_or_is_refused_with_a_policy_error(spec):
    try:
        policy = parse_policy(obj(**spec))
    except PolicyError as error:
        assert str(error).startswith("spec.")
    else:
        assert policy.mode in Mode and (policy.mode is Mode.OFF or policy.model_version is not None)
