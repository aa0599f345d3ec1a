"""A calibration as a file (`dl2.workload.calibration_io`): read back equal to what was written, and every malformed
field refused with the file and the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dl2.core import InputError
from dl2.sim.run import catalogue_speed
from dl2.workload.calibration import CalibratedSpeedModel, Calibration, TypeCalibration
from dl2.workload.calibration_io import calibration_bytes, calibration_to_json, read_calibration, write_calibration
from dl2.workload.catalogue import CATALOGUE


def calibration() -> Calibration:
    return Calibration(
        types={
            ("resnet-50", 0.0, 0.0, 0.0, 0.0): TypeCalibration((0.8, 1.4, 1.1, 0.9), 120, 7, 0.04, 0.21, "jobs"),
            ("vgg-16", 1.0, 4.0, 16.0, 8.0): TypeCalibration(
                (1.2, 1.0, 1.0, 1.3), 40, 3, None, None, "later slots", {"K80": 0.7, "V100": 1.6}, {"K80": 10, "": 30}
            ),
        },
        interference_scale=1.7,
        co_located_records=55,
        by_demand=True,
        seen=frozenset(
            {("resnet-50", 0.0, 0.0, 0.0, 0.0), ("vgg-16", 1.0, 4.0, 16.0, 8.0), ("wlm", 0.0, 0.0, 0.0, 0.0)}
        ),
        mixed_type_records=3,
    )


def test_a_calibration_read_back_is_the_one_written_and_plays_the_same_speeds(tmp_path: Path) -> None:
    written = calibration()
    path = tmp_path / "calibration.json"
    write_calibration(path, written)
    read = read_calibration(path)
    assert read == written
    assert path.read_bytes() == calibration_bytes(written)
    before, after = CalibratedSpeedModel(catalogue_speed(), written), CalibratedSpeedModel(catalogue_speed(), read)
    for model in CATALOGUE:
        for ps, workers in ((1, 1), (2, 4), (0, 3)):
            assert after.throughput(model, ps, workers) == before.throughput(model, ps, workers)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(format="dl2-calibration/9"), "format"),
        (lambda d: d["types"][0].update(factors=[1.0, 1.0, 1.0]), "types[0].factors"),
        (lambda d: d["types"][0].update(factors=[1.0, -1.0, 1.0, 1.0]), "types[0].factors[1]"),
        (lambda d: d["types"][1].update(factors=[1.0, 1.0, float("nan"), 1.0]), "types[1].factors[2]"),
        (lambda d: d["types"][0].update(key=["resnet-50", 0, 0, 0]), "types[0].key"),
        (lambda d: d["types"][1].update(key=d["types"][0]["key"]), "types[1].key"),
        (lambda d: d["types"][1]["speedups"].update(H100=2.0), "types[1].speedups"),
        (lambda d: d["types"][1]["speedups"].update(K80=0), "types[1].speedups.K80"),
        (lambda d: d["types"][0].update(records=-1), "types[0].records"),
        (lambda d: d["types"][0].update(held_out="some"), "types[0].held_out"),
        (lambda d: d.update(by_demand="yes"), "by_demand"),
        (lambda d: d.update(interference_scale=-0.5), "interference_scale"),
        (lambda d: d.update(seen=[["wlm"]]), "seen[0]"),
    ],
)
def test_a_malformed_field_is_refused_by_name(tmp_path: Path, change, field: str) -> None:
    document = json.loads(json.dumps(calibration_to_json(calibration())))
    change(document)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as error:
        read_calibration(path)
    assert error.value.path == str(path) and error.value.field == field


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable JSON file"):
        read_calibration(path)
