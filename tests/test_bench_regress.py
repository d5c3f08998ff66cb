"""benchmarks/regress.py (``make bench``): its comparison flags a planted slowdown and nothing else.

Nothing here is timed: the suite's clock is replaced by a deterministic one that each fake case advances,
so the ratios are exact and the planted busy wait is measured in fake seconds."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def regress() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("icdl_bench_regress", ROOT / "benchmarks" / "regress.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


class FakeClock:
    """A clock that moves only when told to (``advance``), plus a tick per read so busy waits end."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1e-4
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake(regress: ModuleType, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(regress, "CLOCK", clock)

    def setup() -> tuple[object, object, str]:
        return (lambda: clock.advance(1.0)), (lambda: clock.advance(0.1)), "fake-ref"

    monkeypatch.setitem(regress.CASES, "fake/case", regress.Case("fake/case", setup))
    return clock


def entry(ratio: float, reference: str = "lean-gd") -> dict[str, object]:
    return {"ratio": ratio, "reference": reference, "seconds": ratio, "reference_seconds": 1.0}


def test_compare_flags_only_changes_beyond_the_threshold(regress: ModuleType) -> None:
    base = {"a": entry(10.0), "b": entry(10.0), "c": entry(10.0), "d": entry(10.0, "hf-gpt2-sdpa")}
    now = {"a": entry(13.0), "b": entry(11.0), "c": entry(7.0), "d": entry(30.0), "e": entry(1.0)}
    rows = {r["case"]: r for r in regress.compare(now, base, 0.15)}
    assert rows["a"]["status"] == "REGRESSION" and rows["a"]["change"] == pytest.approx(0.3)
    assert rows["b"]["status"] == "ok"
    assert rows["c"]["status"] == "faster"
    # another reference, or a case the baseline lacks, is never compared (and never a regression)
    assert rows["d"]["status"] == rows["e"]["status"] == "not compared"


def test_measure_is_the_ratio_to_the_reference(regress: ModuleType, fake: FakeClock) -> None:
    out = regress.measure(regress.CASES["fake/case"], rounds=3, min_seconds=0.5)
    # every timed interval also holds the clock's two reads (2e-4 fake seconds)
    assert out["ratio"] == pytest.approx(1.0 / 0.1, rel=1e-2)
    assert out["reference"] == "fake-ref"
    planted = regress.measure(regress.CASES["fake/case"], rounds=3, min_seconds=0.5, plant=0.3)
    assert planted["ratio"] == pytest.approx(1.3 / 0.1, rel=1e-2)


def test_a_planted_30_percent_slowdown_fails_the_run(
    regress: ModuleType, fake: FakeClock, tmp_path: Path
) -> None:
    base_path, out = tmp_path / "baseline.json", tmp_path / "now.json"
    args = ["--cases", "fake/case", "--rounds", "3", "--baseline", str(base_path), "--out", str(out)]
    assert regress.main([*args, "--update-baseline"]) == 0
    assert json.loads(base_path.read_text())["cases"]["fake/case"]["ratio"] == pytest.approx(10.0, rel=1e-2)
    assert regress.main(args) == 0  # unchanged: no regression
    assert regress.main([*args, "--plant", "fake/case=0.3"]) == 1
    row = json.loads(out.read_text())["comparison"][0]
    assert row["status"] == "REGRESSION" and row["change"] == pytest.approx(0.3, rel=0.05)
    assert regress.main([*args, "--plant", "fake/case=0.1"]) == 0  # within the 15% threshold


def test_bad_plant_is_a_one_line_usage_error(regress: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ["nosuch=0.3", "forward/rows=x", "forward/rows=-1", "forward/rows"]:
        with pytest.raises(SystemExit) as exc:
            regress.main(["--plant", bad, "--cases", "forward/rows"])
        assert exc.value.code == 2
        assert "--plant" in capsys.readouterr().err


def test_every_case_of_the_suite_is_named_in_the_docs(regress: ModuleType) -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    for name in regress.CASES:
        assert f"`{name}`" in doc, name
