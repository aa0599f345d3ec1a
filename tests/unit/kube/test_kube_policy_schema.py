"""The SchedulerPolicy CRD on the real API server: a structural schema it accepts, defaults it fills in, and the
422s it answers to what the schema and its CEL rules forbid, before the controller ever sees it. Unknown fields
are pruned with a warning by default and refused under strict field validation (what `kubectl apply` asks for)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from dl2.kube.policy import POLICIES, Mode, parse_policy
from tests.builders import policy_object


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "turbo"}, 'spec.mode: Unsupported value: "turbo"'),
        ({"mode": "Off"}, 'spec.mode: Unsupported value: "Off"'),  # a mistyped kill switch
        ({"mode": False}, 'spec.mode: Invalid value: "boolean"'),  # an unquoted YAML off
        ({"mode": "active", "model": {"version": "latest"}}, "spec.model.version"),
        ({"mode": "active", "model": {"name": "dl2-policy"}}, "a pinned model.version is required unless mode is off"),
        ({"mode": "canary", "model": {"version": "1"}}, "canary mode needs canary.namespaces"),
        (
            {"mode": "shadow", "model": {"version": "1"}, "guardrails": {"maxReplicas": -3}},
            "greater than or equal to 0",
        ),
        (
            {"mode": "shadow", "model": {"version": "1"}, "guardrails": {"maxStepPerSlot": 0}},
            "spec.guardrails.maxStepPerSlot",
        ),
        (
            {"mode": "shadow", "model": {"version": "1"}, "guardrails": {"minReplicas": 5, "maxReplicas": 3}},
            "maxReplicas must be at least minReplicas",
        ),
        ({"mode": "shadow", "model": {"version": "1"}, "incumbent": "lottery"}, "spec.incumbent: Unsupported value"),
        (
            {"mode": "canary", "model": {"version": "1"}, "canary": {"namespaces": ["a"], "explore": 0.8}},
            "spec.canary.explore: Invalid value",
        ),
    ],
)
def test_the_api_server_refuses_a_bad_policy_with_422(kube, spec, message):
    body = {"apiVersion": "dl2.io/v1alpha1", "kind": "SchedulerPolicy", "metadata": {"name": "default"}, "spec": spec}
    with pytest.raises(ApiException) as refused:
        kube.rest().create(POLICIES, None, body)
    status = json.loads(refused.value.body)
    assert refused.value.status == 422 and status["reason"] == "Invalid" and message in status["message"], status


def test_defaults_are_filled_in_and_the_controller_reads_the_result(kube, policies):
    stored = policies.create("shadow")
    spec = stored["spec"]
    assert spec["incumbent"] == "drf" and spec["model"]["name"] == "dl2-policy"
    off = kube.rest().patch(POLICIES, None, "default", {"spec": {"mode": "off", "model": None}})
    assert off["spec"]["mode"] == "off" and "model" not in off["spec"]  # off needs no version
    assert parse_policy(off).mode is Mode.OFF
    explored = kube.rest().patch(POLICIES, None, "default", {"spec": {"canary": {"namespaces": ["a"], "explore": 0.1}}})
    assert explored["spec"]["canary"]["explore"] == 0.1 and parse_policy(explored).canary.explore == 0.1


def test_unknown_fields_are_pruned_with_a_warning_or_refused_when_strict(kube):
    rest = kube.rest()
    body = policy_object("shadow")
    body["spec"]["slotSeconds"] = 60
    stored = rest.create(POLICIES, None, body)
    assert "slotSeconds" not in stored["spec"]  # pruned: the structural schema does not know it
    rest.request("DELETE", POLICIES.path(None, "default"))
    with pytest.raises(ApiException) as refused:
        rest.request("POST", POLICIES.path(), body, query={"fieldValidation": "Strict"})
    assert refused.value.status in (400, 422)
    assert 'unknown field "spec.slotSeconds"' in json.loads(refused.value.body)["message"]
