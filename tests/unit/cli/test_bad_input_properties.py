"""Generated bad inputs at every boundary (hypothesis): each is refused cleanly, as one line that names the file,
row or key, within bounded memory, and writes nothing.

Each generator starts from a valid input and breaks one thing in a way that is never valid (a value of another
type, past a stated limit, or unknown), or feeds bytes that cannot form a valid input; the valid starting points
are checked to load, so a refusal is the broken part's.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from annotated_types import Ge, Gt, Le, Lt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dl2.cli.main import main
from dl2.core import InputError
from dl2.core.limits import MAX_NODES, MAX_TASKS_PER_JOB, MAX_TIME_S

PEAK_BYTES = 64 * 2**20
"""A refusal allocates less than this (a job of 1e9 tasks or a cluster of 1e9 nodes would take gigabytes)."""
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CORPUS = Path(__file__).resolve().parents[2] / "bad_inputs"

LETTERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)
NOT_A_NUMBER = st.one_of(
    st.none(),
    st.booleans(),
    LETTERS,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(LETTERS, st.integers(), max_size=2),
)
NOT_A_STRING = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(LETTERS, max_size=3),
    st.dictionaries(LETTERS, st.integers(), max_size=2),
)
NEGATIVE = st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-6, allow_infinity=False))
HUGE = st.one_of(st.integers(min_value=10**13, max_value=10**300), st.floats(min_value=1e13, max_value=1e308))


@contextmanager
def bounded(folder: Path) -> Iterator[None]:
    """The block allocates less than `PEAK_BYTES` and leaves `folder` as it found it."""
    before = sorted(folder.rglob("*"))
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, peak
    assert sorted(folder.rglob("*")) == before


def one_line(message: str, *words: str) -> None:
    assert "\n" not in message and len(message) < 2_000, message
    for word in words:
        assert word in message, (word, message)


# -- trace CSV -------------------------------------------------------------------------------------------------

HEADER = "job_id,submit_time,num_gpus,duration,status,job_type"
GOOD_ROWS = [["a", "0", "1", "100", "unknown", "unknown"], ["b", "60", "8", "3600", "unknown", "resnet-50"]]
BAD_CELLS: dict[str, st.SearchStrategy[str]] = {
    "job_id": st.sampled_from(["", "a"]),  # empty, or a duplicate of row 1
    "submit_time": st.one_of(
        LETTERS,
        st.sampled_from(["", "nan", "inf", "-inf", "1e400"]),
        NEGATIVE.map(str),
        st.floats(min_value=MAX_TIME_S * 1.001, max_value=1e308).map(repr),
    ),
    "num_gpus": st.one_of(
        LETTERS,
        st.sampled_from(["", "0", "1.5", "nan"]),
        NEGATIVE.map(str),
        st.integers(min_value=2_817, max_value=10**30).map(str),
    ),
    "duration": st.one_of(
        LETTERS,
        st.sampled_from(["", "0", "inf"]),
        NEGATIVE.map(str),
        st.floats(min_value=MAX_TIME_S * 1.001, max_value=1e308).map(repr),
    ),
}


@st.composite
def bad_trace(draw: Any) -> tuple[bytes, int, str]:
    """(file bytes, the broken data row, its column)."""
    rows = copy.deepcopy(GOOD_ROWS)
    column = draw(st.sampled_from(sorted(BAD_CELLS)))
    row = 2 if column == "job_id" else draw(st.sampled_from([1, 2]))
    rows[row - 1][HEADER.split(",").index(column)] = draw(BAD_CELLS[column])
    text = "\n".join([HEADER, *(",".join(cells) for cells in rows)]) + "\n"
    return text.encode(), row, column


def test_the_valid_trace_loads(tmp_path: Path) -> None:
    from dl2.workload.registry import load_workloads

    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([HEADER, *(",".join(cells) for cells in GOOD_ROWS)]) + "\n")
    assert load_workloads(str(path))[0].num_jobs == 2


@SETTINGS
@given(case=bad_trace())
def test_a_generated_bad_trace_is_refused_naming_its_row_and_column(
    case: tuple[bytes, int, str], tmp_path: Path
) -> None:
    from dl2.workload.registry import load_workloads

    data, row, column = case
    path = tmp_path / "jobs.csv"
    path.write_bytes(data)
    with bounded(tmp_path), pytest.raises(InputError) as raised:
        load_workloads(str(path))
    one_line(str(raised.value), str(path), f"row {row}", column)


# -- authors' JSON ---------------------------------------------------------------------------------------------

GOOD_DOCUMENT = json.loads((CORPUS / "workload/model-unknown.json").read_text())
GOOD_DOCUMENT["traces"][0][1]["model"] = "resnet-50"
NODE_SLOTS = 8
BAD_JOB_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "job_id": st.one_of(st.none(), st.booleans(), st.just(""), st.floats(), st.lists(st.integers(), max_size=2)),
    "model": st.one_of(NOT_A_STRING, LETTERS.filter(lambda t: t not in ("dssm", "wlm"))),
    "arrival_slot": st.one_of(NOT_A_NUMBER, NEGATIVE, HUGE),
    "total_epochs": st.one_of(NOT_A_NUMBER, NEGATIVE, HUGE, st.just(0)),
    "real_epochs": st.one_of(NOT_A_NUMBER, NEGATIVE, HUGE, st.just(0)),
    "samples_per_epoch_unit": st.one_of(NOT_A_NUMBER, NEGATIVE, HUGE, st.just(0)),
    "worker_demand": st.one_of(
        NOT_A_NUMBER,
        st.just({"gpu": 0, "cpu": 0}),
        st.fixed_dictionaries({"gpu": st.one_of(NOT_A_NUMBER, NEGATIVE, HUGE), "cpu": st.just(2)}),
        st.fixed_dictionaries({"gpu": st.just(4), "cpu": st.integers(min_value=NODE_SLOTS + 1, max_value=10**6)}),
    ),
    "ps_demand": st.one_of(NOT_A_NUMBER, st.just({"gpu": 0}), st.just({"gpu": 0, "cpu": 0})),
}
BAD_SETTINGS: dict[str, st.SearchStrategy[Any]] = {
    "num_nodes": st.one_of(NOT_A_NUMBER, st.integers(max_value=0), st.integers(min_value=MAX_NODES + 1), st.floats()),
    "max_workers_per_job": st.one_of(
        NOT_A_NUMBER, st.integers(max_value=0), st.integers(min_value=MAX_TASKS_PER_JOB + 1)
    ),
    "slot_seconds": st.one_of(
        NOT_A_NUMBER, NEGATIVE, st.just(0), st.floats(min_value=MAX_TIME_S * 1.001, max_value=1e308)
    ),
    "slots_per_node": st.one_of(NOT_A_NUMBER, st.just({"gpu": 0, "cpu": 0}), st.just({"gpu": 8})),
    "traces": st.one_of(st.just([]), NOT_A_NUMBER, st.just([[]]), st.just([[1, 2]])),
}


@st.composite
def bad_document(draw: Any) -> tuple[str, str]:
    """(JSON text, the field that is broken)."""
    document = copy.deepcopy(GOOD_DOCUMENT)
    if draw(st.booleans()):
        field = draw(st.sampled_from(sorted(BAD_JOB_VALUES)))
        document["traces"][0][1][field] = draw(BAD_JOB_VALUES[field])
    else:
        field = draw(st.sampled_from(sorted(BAD_SETTINGS)))
        document[field] = draw(BAD_SETTINGS[field])
    return json.dumps(document), field


def test_the_valid_document_loads(tmp_path: Path) -> None:
    from dl2.workload.registry import load_workloads

    path = tmp_path / "w.json"
    path.write_text(json.dumps(GOOD_DOCUMENT))
    assert load_workloads(str(path))[0].num_jobs == 2


@SETTINGS
@given(case=bad_document())
def test_a_generated_bad_workload_document_is_refused_naming_its_field(case: tuple[str, str], tmp_path: Path) -> None:
    from dl2.workload.registry import load_workloads

    text, field = case
    path = tmp_path / "w.json"
    path.write_text(text)
    with bounded(tmp_path), pytest.raises(InputError) as raised:
        load_workloads(str(path))
    one_line(str(raised.value), str(path), field if field != "traces" else "")


DEEP = st.integers(1_000, 20_000).map(lambda n: b"[" * n + b"]" * n)


@SETTINGS
@given(name=st.sampled_from(["jobs.csv", "w.json"]), data=st.one_of(st.binary(min_size=1, max_size=400), DEEP))
def test_generated_bytes_are_never_a_workload(name: str, data: bytes, tmp_path: Path) -> None:
    from dl2.workload.registry import load_workloads

    path = tmp_path / name
    path.write_bytes(data)
    with bounded(tmp_path), pytest.raises(InputError) as raised:
        load_workloads(str(path))
    one_line(str(raised.value), str(path))


# -- model folders ---------------------------------------------------------------------------------------------

GOOD_CONFIG = json.loads((CORPUS / "model/window-zero.json").read_text())
GOOD_CONFIG["observation"]["window"] = 4
BAD_CONFIG_VALUES: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("observation", "window"): st.one_of(
        LETTERS, st.lists(st.integers(), max_size=2), st.integers(max_value=0), st.integers(min_value=1_001)
    ),
    ("network", "hidden"): st.one_of(
        st.just([]),
        LETTERS,
        st.lists(st.integers(max_value=0), min_size=1, max_size=3),
        st.lists(st.integers(min_value=65_537), min_size=1, max_size=2),
    ),
    ("network", "kind"): st.one_of(NOT_A_STRING, LETTERS.filter(lambda t: t != "mlp")),
    ("mode",): st.one_of(NOT_A_STRING, LETTERS.filter(lambda t: t not in ("compat", "realistic"))),
    ("placer",): st.one_of(NOT_A_STRING, LETTERS.filter(lambda t: t not in ("tetris", "binpack"))),
    ("format",): st.one_of(NOT_A_STRING, LETTERS),
    ("metadata",): st.one_of(st.lists(st.integers(), min_size=1, max_size=2), st.integers(), LETTERS),
}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dl2.env.observation import ObservationConfig
    from dl2.rl.config import NetworkConfig
    from dl2.rl.model_io import PolicyConfig, save_model
    from dl2.rl.networks import PolicyNetwork

    config = PolicyConfig(ObservationConfig(window=4), NetworkConfig(hidden=(8,), kind="per-job"))
    policy = PolicyNetwork(config.observation.shape, config.network)
    folder = save_model(tmp_path_factory.mktemp("model") / "m", config, policy.state_dict())
    (folder / "config.json").write_text(json.dumps(GOOD_CONFIG))
    return folder


def test_the_valid_model_folder_loads(model_folder: Path) -> None:
    from dl2.rl.learned import LearnedScheduler

    assert LearnedScheduler.from_dir(model_folder).config.network.hidden == (8,)


@SETTINGS
@given(data=st.data())
def test_a_generated_bad_model_config_is_refused(data: Any, model_folder: Path) -> None:
    from dl2.rl.learned import LearnedScheduler

    path = data.draw(st.sampled_from(sorted(BAD_CONFIG_VALUES)))
    document = copy.deepcopy(GOOD_CONFIG)
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = data.draw(BAD_CONFIG_VALUES[path])
    (model_folder / "config.json").write_text(json.dumps(document))
    try:
        with bounded(model_folder), pytest.raises(InputError) as raised:
            LearnedScheduler.from_dir(model_folder)
    finally:
        (model_folder / "config.json").write_text(json.dumps(GOOD_CONFIG))
    one_line(str(raised.value), str(model_folder))


# -- decision records ------------------------------------------------------------------------------------------

GOOD_RECORD = json.loads((CORPUS / "log/mode-unknown.jsonl").read_text().splitlines()[0])


def _bad_value(kind: str, name: str) -> st.SearchStrategy[Any]:
    if kind == "label":  # may be empty, but text of bounded length
        return st.one_of(NOT_A_STRING, st.text(min_size=257, max_size=300))
    if kind == "totals":  # names to seconds or null: anything else, a bad name or a bad number is refused
        bad_seconds = st.one_of(NEGATIVE, LETTERS, st.booleans(), st.just(float("inf")), st.just([1.0]))
        return st.one_of(
            st.one_of(NOT_A_STRING, NEGATIVE, st.lists(st.floats(0, 10), max_size=2)).filter(
                lambda v: v is not None and v != {}  # no totals at all is good
            ),
            st.dictionaries(st.sampled_from(["optimus", "dl2"]), bad_seconds, min_size=1, max_size=2),
            st.just({"": 1.0}),
            st.dictionaries(st.text(min_size=1, max_size=4), st.just(1.0), min_size=17, max_size=20),
        )
    if kind == "types":  # a list of type names, one per worker node ('' the reference): anything else is bad
        return st.one_of(
            NOT_A_STRING.filter(lambda v: not isinstance(v, list)),
            LETTERS,
            st.lists(st.one_of(NEGATIVE, st.booleans(), st.none()), min_size=1, max_size=3),
            st.just(["V100"] * (len(GOOD_RECORD.get("applied_worker_nodes", [])) + 1)),
            st.lists(st.text(min_size=257, max_size=300), min_size=1, max_size=1),
        )
    if kind == "text":
        bad = st.one_of(NOT_A_STRING, st.just(""), st.text(min_size=257, max_size=300))
        if name in ("mode", "architecture"):
            bad = st.one_of(bad, LETTERS.filter(lambda t: t not in ("shadow", "canary", "active", "simulated", "ps")))
        return bad
    numbers = st.one_of(NOT_A_NUMBER.filter(lambda v: v is not None), NEGATIVE, st.just("3"))
    if kind == "nodes":  # a list of node indices: a list of anything else is bad, and so is anything not a list
        not_an_index = st.one_of(
            NEGATIVE, LETTERS, st.booleans(), st.none(), st.integers(min_value=MAX_TASKS_PER_JOB + 1)
        )
        return st.one_of(
            numbers.filter(lambda v: not isinstance(v, list)),
            st.lists(not_an_index, min_size=1, max_size=3),
            st.lists(st.integers(0, 8), max_size=2).flatmap(lambda good: not_an_index.map(lambda bad: [*good, bad])),
        )
    if kind == "integer":
        return st.one_of(
            numbers,
            st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not v.is_integer()),
            st.integers(min_value=MAX_TASKS_PER_JOB + 1),
        )
    if kind == "probability":  # (0, 1]: zero and above one are refused too
        return st.one_of(numbers, st.just(0), st.floats(min_value=1.0, exclude_min=True, allow_infinity=False))
    return numbers


@SETTINGS
@given(data=st.data())
def test_a_generated_bad_record_is_refused_by_the_parser_and_flagged_by_the_suite_frame(
    data: Any, tmp_path: Path
) -> None:
    from dl2.core import DecisionRecord
    from dl2.core.log_format import parse_record
    from pipelines.validate import log_frames

    kinds = DecisionRecord.field_kinds()
    name = data.draw(st.sampled_from(sorted(kinds)))
    record = {**GOOD_RECORD, name: data.draw(_bad_value(kinds[name], name))}
    line = json.dumps(record, sort_keys=True)
    with bounded(tmp_path), pytest.raises(InputError) as raised:
        parse_record(line, "log.jsonl", 7)
    one_line(str(raised.value), "log.jsonl, row 7", name)
    if name not in ("mode", "architecture") or not isinstance(record[name], str):
        path = tmp_path / "log.jsonl"
        path.write_text(json.dumps(GOOD_RECORD) + "\n" + line + "\n")
        _, typed = log_frames(path)
        # the suite's type check names it (a null is the not-null check's)
        flagged = typed["type_problem"].notna().tolist() == [False, True]
        assert flagged or (record[name] is None and typed[name].isna().tolist() == [False, True])


# -- params.yaml -----------------------------------------------------------------------------------------------


def _params_keys() -> list[tuple[str, str, Any]]:
    """(section, flat key, annotation) of every key params.yaml takes."""
    from pipelines.params import FINETUNE_KEYS, SECTIONS, WARMUP_SECTION_KEYS

    keys = [("warmup", key.name, key.annotation) for key in WARMUP_SECTION_KEYS]
    keys += [("finetune", key.name, key.annotation) for key in FINETUNE_KEYS]
    for section, cls in SECTIONS.items():
        import typing

        hints = typing.get_type_hints(cls, include_extras=True)
        keys += [(section, name, hints[name]) for name in cls.__pydantic_fields__]  # type: ignore[attr-defined]
    return keys


def _out_of_bounds(annotation: Any) -> st.SearchStrategy[Any] | None:
    """Numbers past an annotation's stated bounds, if it states any."""
    import typing

    bounds = [m for m in typing.get_args(annotation)[1:] if isinstance(m, Ge | Gt | Le | Lt)]
    choices: list[st.SearchStrategy[Any]] = []
    for bound in bounds:
        if isinstance(bound, Ge):
            choices.append(st.just(bound.ge - 1))
        elif isinstance(bound, Gt):
            choices.append(st.just(bound.gt - 1))
        elif isinstance(bound, Le):
            choices.append(st.just(bound.le * 2 + 1))
        else:
            choices.append(st.just(bound.lt * 2 + 1))
    return st.one_of(*choices) if choices else None


PARAMS_KEYS = _params_keys()
NEVER_A_SETTING = st.one_of(
    st.dictionaries(LETTERS, st.integers(), min_size=1, max_size=2),
    st.lists(st.dictionaries(LETTERS, st.integers(), min_size=1, max_size=1), min_size=1, max_size=2),
)


@SETTINGS
@given(data=st.data())
def test_a_generated_bad_params_value_is_refused_naming_its_key(data: Any) -> None:
    from pipelines.params import ParamsError, from_mapping

    section, key, annotation = data.draw(st.sampled_from(PARAMS_KEYS))
    bounded_values = _out_of_bounds(annotation)
    strategies = [NEVER_A_SETTING] + ([bounded_values] if bounded_values is not None else [])
    value = data.draw(st.one_of(*strategies))
    with pytest.raises(ParamsError) as raised:
        from_mapping({section: {key: value}})
    one_line(str(raised.value), key)


@SETTINGS
@given(section=st.sampled_from(["warmup", "finetune", "data", "validate", "workloads", "evaluate"]), key=LETTERS)
def test_an_unknown_params_key_is_refused(section: str, key: str) -> None:
    from pipelines.params import ParamsError, from_mapping

    known = {name for s, name, _ in PARAMS_KEYS if s == section}
    if key in known:
        return
    with pytest.raises(ParamsError) as raised:
        from_mapping({section: {key: 1}})
    one_line(str(raised.value), key, "unknown key")


# -- command-line arguments ------------------------------------------------------------------------------------


def _rl_flags() -> list[tuple[str, Any]]:
    from dl2.env.config import ENV_KEYS
    from dl2.rl.config import RL_KEYS

    return [(key.flag, key.annotation) for keys in (RL_KEYS, ENV_KEYS) for key in keys if key.annotation is not bool]


RL_FLAGS = _rl_flags()


@SETTINGS
@given(data=st.data())
def test_a_generated_bad_training_flag_is_one_line_and_status_2(
    data: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flag, annotation = data.draw(st.sampled_from(RL_FLAGS))
    bounded_values = _out_of_bounds(annotation)
    strategies: list[st.SearchStrategy[Any]] = [LETTERS.map(lambda t: "zz" + t)]
    if bounded_values is not None:
        strategies.append(bounded_values.map(str))
    value = data.draw(st.one_of(*strategies))
    out = tmp_path / "out"
    code = main(["train-rl", flag, value, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    (line,) = captured.err.splitlines()
    assert flag in line and "Traceback" not in line, line
    assert not out.exists()


CLI_COMMANDS: list[Callable[[str], list[str]]] = [
    lambda value: ["simulate", "-w", "synthetic-small", "-s", "drf", "--seed", value],
    lambda value: ["compare", "-w", "synthetic-small", "--seeds", value],
    lambda value: ["cluster", "--port", value],
    lambda value: ["cluster", "--simulate", "synthetic-small", "--nodes", value],
]


@SETTINGS
@given(
    command=st.sampled_from(CLI_COMMANDS),
    value=st.one_of(
        st.integers(max_value=-1).map(str),
        st.integers(min_value=10**19, max_value=10**40).map(str),
        LETTERS,
        st.sampled_from(["nan", "1e308", "-0.5"]),
    ),
)
def test_a_generated_absurd_count_is_one_line_and_status_2(
    command: Callable[[str], list[str]], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(command(value))
    except SystemExit as stopped:  # argparse: not a number at all
        code = int(stopped.code or 0)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
