"""events.jsonl keeps one record per line for every line reader: model text with U+2028 / U+2029 / U+0085
(which json.dumps(ensure_ascii=False) leaves raw, and str.splitlines() breaks at) is written escaped."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.telemetry import EventEmitter, JsonlSink, make_event, read_events

# every character str.splitlines() breaks at, inside model text
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
TEXT = "".join(f"part {i}{c}" for i, c in enumerate(BREAKS)) + "\r\nend"
SAMPLE = {"prompt": f"say{BREAKS}", "response": TEXT, "reward": 1.0, "advantage": 0.5, "prompt_length": 3,
          "response_length": 7, "stop_reason": "eos", "group_id": 0, "sample_index": 0}


def test_each_event_is_one_line_for_str_splitlines_and_reads_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventEmitter("r", 1, [JsonlSink(path)]) as emitter:
        emitter.rollouts([SAMPLE], step=1)
        emitter.log("info", "a log line with\u2028a separator and \x85 a NEL", step=1)
        emitter.metrics({"odd\u2029key": 1.0}, step=1)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) == 3  # before: the rollouts record alone broke into several "lines"
    assert [json.loads(line)["type"] for line in lines] == ["rollouts", "log", "metrics"]
    assert json.loads(lines[0])["data"]["samples"][0]["response"] == TEXT
    assert json.loads(lines[0])["data"]["samples"][0]["prompt"] == f"say{BREAKS}"
    assert json.loads(lines[2])["data"]["values"] == {"odd\u2029key": 1.0}
    assert not any(c in text for c in "\x85\u2028\u2029")  # escaped, not raw
    assert [e["data"] for e in read_events(path)] == [json.loads(line)["data"] for line in lines]


def test_to_json_escapes_only_what_a_line_reader_would_split_at() -> None:
    event = make_event("log", run_id="r", attempt=1, seq=1, step=0,
                       data={"level": "info", "lines": ["x\u2028y\u2029z\x85w é 中文 🙂"]})
    text = event.to_json()
    assert len(text.splitlines()) == 1
    assert "\\u2028" in text and "\\u2029" in text and "\\u0085" in text
    assert "é 中文 🙂" in text  # everything else stays readable UTF-8 (ensure_ascii=False)
    assert json.loads(text)["data"]["lines"] == ["x\u2028y\u2029z\x85w é 中文 🙂"]
