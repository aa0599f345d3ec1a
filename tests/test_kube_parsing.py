"""Patches, selectors, paths and the job contract of the local API server: RFC examples, hand cases, properties."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dl2.core import Architecture, JobSpec, Resources
from dl2.kube.apiserver import contract
from dl2.kube.apiserver.errors import ApiError
from dl2.kube.apiserver.patches import json_patch, merge_patch, strategic_merge_patch
from dl2.kube.apiserver.paths import ApiPath, parse_api_path, rbac_verb
from dl2.kube.apiserver.selectors import FieldSelector, LabelRequirement, LabelSelector, Operator
from dl2.kube.apiserver.sim import manifests
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

# RFC 7386, appendix A: (target, patch, result)
MERGE_EXAMPLES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), MERGE_EXAMPLES)
def test_merge_patch_rfc7386_examples(target, patch, result):
    before = copy.deepcopy((target, patch))
    assert merge_patch(target, patch) == result
    assert (target, patch) == before  # arguments untouched


def test_merge_patch_shares_the_unchanged_branches():
    target = {"spec": {"big": {"x": 1}}, "metadata": {"annotations": {"a": "1"}}}
    patched = merge_patch(target, {"metadata": {"annotations": {"b": "2"}}})
    assert patched["spec"] is target["spec"] and patched["metadata"] is not target["metadata"]


# RFC 6902, appendix A (the ones that apply to Kubernetes objects)
JSON_PATCH_EXAMPLES = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}], {"foo": ["bar", ["abc", "def"]]}),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
    (
        {"spec": {"tasks": [{"name": "ps", "replicas": 1}, {"name": "worker", "replicas": 2}]}},
        [{"op": "replace", "path": "/spec/tasks/1/replicas", "value": 6}],
        {"spec": {"tasks": [{"name": "ps", "replicas": 1}, {"name": "worker", "replicas": 6}]}},
    ),
]


@pytest.mark.parametrize(("doc", "patch", "result"), JSON_PATCH_EXAMPLES)
def test_json_patch_rfc6902_examples(doc, patch, result):
    before = copy.deepcopy(doc)
    assert json_patch(doc, patch) == result
    assert doc == before


@pytest.mark.parametrize(
    ("doc", "patch", "code"),
    [
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], 422),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}], 422),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/1"}], 422),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/01", "value": 2}], 422),
        ({"a": 1}, [{"op": "test", "path": "/a", "value": True}], 422),  # true is not 1 in JSON
        ({"a": 1}, [{"op": "frob", "path": "/a"}], 400),
        ({"a": 1}, [{"op": "add", "path": "a", "value": 1}], 400),
        ({"a": 1}, {"op": "add"}, 400),
    ],
)
def test_json_patch_errors(doc, patch, code):
    with pytest.raises(ApiError) as error:
        json_patch(doc, patch)
    assert error.value.code == code


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=10,
)


@given(
    st.dictionaries(st.text(min_size=1, max_size=4), json_values, max_size=4),
    st.text(min_size=1, max_size=4),
    json_values,
)
def test_json_patch_add_then_remove_restores_the_document(doc, key, value):
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    added = json_patch(doc, [{"op": "add", "path": pointer, "value": value}])
    assert added[key] == value
    if key not in doc:
        assert json_patch(added, [{"op": "remove", "path": pointer}]) == doc


def test_strategic_merge_patch_merges_keyed_lists():
    pod = {
        "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
        "metadata": {"finalizers": ["x"], "labels": {"k": "v"}},
    }
    patched = strategic_merge_patch(
        pod,
        {
            "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "1"}]},
            "metadata": {"finalizers": ["y"], "labels": {"k": None}},
        },
    )
    assert patched["spec"]["containers"] == [
        {"name": "a", "image": "1"},
        {"name": "b", "image": "2"},
        {"name": "c", "image": "1"},
    ]
    assert patched["metadata"] == {"finalizers": ["x", "y"], "labels": {}}
    deleted = strategic_merge_patch(
        patched,
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}, "$deleteFromPrimitiveList/metadata": None},
    )
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b", "c"]
    replaced = strategic_merge_patch(pod, {"metadata": {"$patch": "replace", "labels": {"n": "1"}}})
    assert replaced["metadata"] == {"labels": {"n": "1"}}
    conditions = strategic_merge_patch(
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
    )
    assert conditions["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


# -- selectors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b,c)", {}, True),
        ("a notin (b,c)", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("a=b,c", {"a": "b"}, False),
        ("a>3", {"a": "4"}, True),
        ("a<3", {"a": "x"}, False),
        ("dl2.io/managed=true", {"dl2.io/managed": "true"}, True),
        ("a=", {"a": ""}, True),
    ],
)
def test_label_selectors(selector, labels, matches):
    assert LabelSelector.parse(selector).matches(labels) is matches


@pytest.mark.parametrize("bad", ["a in (b", "a=b=c", "-a=b", "a=b c", "a in ()", "!a=b", "a>x", "a=b)"])
def test_bad_label_selectors_are_400(bad):
    with pytest.raises(ApiError) as error:
        LabelSelector.parse(bad)
    assert error.value.code == 400


label_names = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?", fullmatch=True)
label_keys = st.one_of(
    label_names, st.builds(lambda p, n: f"{p}.io/{n}", st.from_regex(r"[a-z]{1,5}", fullmatch=True), label_names)
)
requirements = st.one_of(
    st.builds(LabelRequirement, label_keys, st.sampled_from([Operator.EXISTS, Operator.NOT_EXISTS])),
    st.builds(
        lambda k, op, v: LabelRequirement(k, op, (v,)),
        label_keys,
        st.sampled_from([Operator.EQUALS, Operator.NOT_EQUALS]),
        label_names,
    ),
    st.builds(
        lambda k, op, vs: LabelRequirement(k, op, tuple(vs)),
        label_keys,
        st.sampled_from([Operator.IN, Operator.NOT_IN]),
        st.lists(label_names, min_size=1, max_size=3),
    ),
)


@given(st.lists(requirements, max_size=4), st.dictionaries(label_keys, label_names, max_size=4))
def test_label_selectors_parse_what_they_print_and_match_each_requirement(parts, labels):
    selector = LabelSelector(tuple(parts))
    parsed = LabelSelector.parse(str(selector))
    assert parsed == selector
    assert parsed.matches(labels) == all(r.matches(labels) for r in parts)


def test_field_selectors():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "hostNetwork": False}}
    assert FieldSelector.parse("metadata.name=p,spec.nodeName!=").matches(pod)
    assert not FieldSelector.parse("spec.nodeName=").matches(pod)
    assert FieldSelector.parse("spec.schedulerName=").matches(pod)  # absent reads as ""
    assert FieldSelector.parse("spec.hostNetwork=false").matches(pod)
    assert FieldSelector.parse(r"metadata.name=a\,b").requirements[0].value == "a,b"
    with pytest.raises(ApiError):
        FieldSelector.parse("metadata.name")


# -- paths -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parsed"),
    [
        ("/api/v1/namespaces", ApiPath("", "v1", "namespaces")),
        ("/api/v1/namespaces/team-a", ApiPath("", "v1", "namespaces", None, "team-a")),
        ("/api/v1/namespaces/team-a/status", ApiPath("", "v1", "namespaces", None, "team-a", "status")),
        ("/api/v1/namespaces/team-a/pods", ApiPath("", "v1", "pods", "team-a")),
        ("/api/v1/namespaces/team-a/pods/p/binding", ApiPath("", "v1", "pods", "team-a", "p", "binding")),
        ("/api/v1/nodes/n1", ApiPath("", "v1", "nodes", None, "n1")),
        (
            "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/scale",
            ApiPath("kubeflow.org", "v1", "pytorchjobs", "ns", "j", "scale"),
        ),
        ("/apis/kubeflow.org/v1/pytorchjobs", ApiPath("kubeflow.org", "v1", "pytorchjobs")),
        ("/apis/kubeflow.org/v1", ApiPath("kubeflow.org", "v1")),
        ("/apis/kubeflow.org", None),
        ("/version", None),
    ],
)
def test_api_paths(path, parsed):
    assert parse_api_path(path) == parsed


def test_rbac_verbs():
    pods = ApiPath("", "v1", "pods", "ns")
    pod = ApiPath("", "v1", "pods", "ns", "p")
    assert [rbac_verb("GET", pods, {}), rbac_verb("GET", pods, {"watch": "true"}), rbac_verb("GET", pod, {})] == [
        "list",
        "watch",
        "get",
    ]
    assert [rbac_verb(m, pod, {}) for m in ("PUT", "PATCH", "DELETE")] == ["update", "patch", "delete"]
    assert [rbac_verb("POST", pods, {}), rbac_verb("DELETE", pods, {}), rbac_verb("GET", None, {})] == [
        "create",
        "deletecollection",
        "get",
    ]


# -- the job contract ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), ("500m", 0.5), ("24Gi", 24 * 2**30), ("1.5Ki", 1536), ("2k", 2000), ("1e3", 1000), (".5", 0.5)],
)
def test_quantities(text, value):
    assert float(contract.parse_quantity(text)) == value


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_quantities_round_trip_exactly(value):
    assert float(contract.parse_quantity(contract.format_quantity(value))) == value
    gib = contract.parse_quantity(contract.format_quantity(value, "Gi")) / 2**30
    assert float(gib) == value


amounts = st.floats(min_value=0, max_value=512, allow_nan=False, allow_infinity=False)


@st.composite
def job_specs(draw):
    model = draw(st.sampled_from(MODEL_NAMES))
    allreduce = draw(st.booleans())
    max_workers = draw(st.integers(1, 32))
    max_ps = 0 if allreduce else draw(st.integers(1, 32))
    return JobSpec(
        job_id=draw(st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True)),
        model=model,
        arrival_s=draw(st.floats(min_value=0, max_value=1e7, allow_nan=False)),
        declared_epochs=draw(st.floats(min_value=0.001, max_value=1e5, allow_nan=False)),
        samples_per_epoch=draw(st.sampled_from([CATALOGUE[model].samples_per_epoch, 123.25])),
        worker_demand=Resources(draw(amounts), draw(amounts), draw(amounts)),
        ps_demand=Resources() if allreduce else Resources(0.0, draw(amounts), draw(amounts)),
        max_workers=max_workers,
        max_ps=max_ps,
        architecture=Architecture.ALLREDUCE if allreduce else Architecture.PS,
        requested_workers=draw(st.integers(1, max_workers)),
        requested_ps=0 if allreduce else draw(st.integers(1, max_ps)),
    )


@given(job_specs())
def test_a_job_spec_reads_back_exactly_from_its_manifest(spec):
    obj = manifests.job(spec, "job-0001-x", "team-a")
    obj["metadata"]["uid"] = "u"
    assert contract.job_spec(obj) == spec
    assert contract.replicas(obj) == (spec.requested_workers, spec.requested_ps)
    subresource, content_type, body = contract.resize(obj, 3, 2)
    if spec.architecture is Architecture.ALLREDUCE:
        assert (subresource, body) == ("scale", {"spec": {"replicas": 3}})
    else:
        resized = json_patch(obj, body)
        assert content_type == "application/json-patch+json" and contract.replicas(resized) == (3, 2)


def test_contract_errors_name_the_object():
    obj = manifests.job(
        JobSpec("j", "vgg-16", 0.0, 10.0, 115, Resources(1, 4, 24), Resources(0, 4, 8), 4, 4), "job-1", "ns"
    )
    del obj["metadata"]["annotations"][contract.DECLARED_EPOCHS]
    with pytest.raises(contract.ContractError, match=r"Job ns/job-1: missing annotation dl2\.io/declared-epochs"):
        contract.job_spec(obj)
    obj["metadata"]["annotations"][contract.DECLARED_EPOCHS] = "many"
    with pytest.raises(contract.ContractError, match="not a number"):
        contract.job_spec(obj)
    with pytest.raises(contract.ContractError, match="not a PyTorchJob or a Volcano Job"):
        contract.job_spec({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
