import json
import time

import pytest

from papershelf.bench import compare, format_table, measure, record, report, validate_record, write_records


def test_compare_recovers_a_known_cost_ratio():
    """Sleep 4 ms against 12 ms: the ratio must come out near 3 (sleep overshoots a little, never less)."""
    comp = compare(lambda: time.sleep(0.004), lambda: time.sleep(0.012), warmup=1, repeat=7)
    assert 2.4 < comp.ratio < 3.3, comp.ratio
    assert comp.speedup == pytest.approx(1 / comp.ratio)
    assert len(comp.baseline.times) == len(comp.candidate.times) == 7


def test_measure_counts_calls():
    calls = []
    timing = measure(lambda: calls.append(1), warmup=2, repeat=4)
    assert len(calls) == 6 and len(timing.times) == 4
    with pytest.raises(ValueError):
        measure(lambda: None, repeat=0)


def _rec(**kw):
    base = dict(
        package="p",
        version="0.1.0",
        benchmark="b",
        setting={"n": 1},
        metric="seconds",
        better="lower",
        candidate="fast",
        candidate_value=1.0,
        baseline="slow",
        baseline_value=4.0,
        repeats=3,
    )
    return record(**{**base, **kw})


def test_record_ratio_target_and_schema():
    rec = _rec(target=0.5)
    assert rec["ratio"] == 0.25 and rec["met"] is True
    assert _rec(target=0.1)["met"] is False
    assert _rec(better="higher", target=0.5)["met"] is False
    assert _rec()["met"] is None
    assert validate_record(rec) == []
    assert "env" in rec and "python" in rec["env"]
    broken = dict(rec, better="sideways")
    del broken["repeats"]
    assert validate_record(broken) == ["missing key 'repeats'"]
    assert validate_record(dict(rec, better="sideways")) == ["better must be 'lower' or 'higher'"]
    with pytest.raises(ValueError):
        _rec(better="sideways")


def test_write_records_and_report(tmp_path):
    path = tmp_path / "b.json"
    write_records(path, [_rec(target=0.5)])
    assert json.loads(path.read_text())[0]["ratio"] == 0.25
    md = report([path])
    assert "| p | b | seconds |" in md and "≤ 0.5" in md and "yes" in md
    assert "No full benchmark" in report([])
    with pytest.raises(ValueError):
        write_records(tmp_path / "bad.json", [{"package": "p"}])
    assert not (tmp_path / "bad.json").exists()
    assert format_table([_rec()]).count("\n") == 2
