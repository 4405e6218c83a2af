"""Stored records checked as they are read (record_schema.py), and display text (display.py).

What the backends write reads back unchanged; a wrong type or an unknown enum in any field is
one line naming the trial and the field. The display functions leave no control character
and no markup. (The commands end to end, with crafted studies: test_display_safety.py.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from testing import RESNET18 as PROBLEM

from ipu_autotune.backends.base import FAILURE_KINDS, Measurement, failed
from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.present.display import html_text, terminal_cell, terminal_text
from ipu_autotune.problem import Config
from ipu_autotune.study.record_schema import UnreadableRecord, check_record

CONFIGS = [
    Config(),
    Config(precision="16.16", ipus_per_replica=2, splits=("layer3",), gradient_accumulation=3),
    Config(
        precision="16.16",
        replicas=2,
        optimizer_offload=True,
        replicated_tensor_sharding=True,
        device_iterations=8,
        loader_workers=4,
    ),
]


def stored(m: Measurement, config: Config = Config(), origin: str = "sampled") -> dict[str, Any]:
    """A record as the runner writes it, through JSON as the storage keeps it."""
    record: dict[str, Any] = json.loads(
        json.dumps(
            {
                "config": config.to_dict(),
                "measurement": {**m.to_dict(), "details": m.details},
                "origin": origin,
                "seconds": 0.25,
            }
        )
    )
    return record


@pytest.mark.parametrize("config", CONFIGS, ids=["fp32", "pipelined", "replicated"])
def test_what_the_estimator_writes_reads_back_unchanged(config: Any) -> None:
    m = EstimateBackend().measure(PROBLEM, config)
    got_config, got, origin, seconds = check_record(stored(m, config), 3)
    assert got_config == config and got == m and (origin, seconds) == ("sampled", 0.25)


@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_failures_read_back_unchanged(kind: Any) -> None:
    m = failed(kind, "why it failed", source="compile", log="x.log")
    assert check_record(stored(m), 0)[1] == m


GOOD = stored(EstimateBackend().measure(PROBLEM, CONFIGS[1]), CONFIGS[1])


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        (
            "measurement",
            "source",
            "<script>",
            "trial 7 measurement: 'source' must be one of 'estimate', 'compile', 'run'",
        ),
        (
            "measurement",
            "failure",
            "meltdown",
            "trial 7 measurement: 'failure' must be one of 'oom'",
        ),
        (
            "measurement",
            "throughput",
            "fast",
            "trial 7 measurement: 'throughput' must be a number or null",
        ),
        (
            "measurement",
            "feasible",
            "yes",
            "trial 7 measurement: 'feasible' must be true or false",
        ),
        (
            "measurement",
            "required_bytes",
            [1, "2"],
            "trial 7 measurement: 'required_bytes' must be a list of (a whole",
        ),
        (
            "measurement",
            "breakdown",
            [{"weights": "1"}, {}],
            "trial 7 measurement: 'breakdown' must be a list of",
        ),
        ("measurement", "details", [], "trial 7 measurement: 'details' must be a table"),
        ("measurement", "reason", 5, "trial 7 measurement: 'reason' must be text, got 5"),
        (
            "measurement",
            "capacity_bytes",
            [1],
            "trial 7 measurement: the per-IPU lists differ in length",
        ),
        (
            "measurement",
            "tile_capacity_bytes",
            0,
            "trial 7 measurement: 'tile_capacity_bytes' must be positive",
        ),
        (
            "measurement",
            "headroom",
            1.0,
            "trial 7 measurement: 'headroom' must be from 0 up to 1, got 1.0",
        ),
        (
            "config",
            "precision",
            "8.8",
            "trial 7 config: 'precision' must be one of '32.32', '16.32', '16.16'",
        ),
        (
            "config",
            "gradient_accumulation",
            "8",
            "trial 7 config: 'gradient_accumulation' must be a whole number",
        ),
        ("config", "splits", "layer3", "trial 7 config: 'splits' must be a list of module paths"),
        ("config", "__class__", "os.system", "trial 7 config: unknown key '__class__'"),
    ],
)
def test_a_wrong_type_or_unknown_value_names_the_trial_and_the_field(
    section: str, key: str, value: float | int | list[Any] | str, message: str
) -> None:
    rec = json.loads(json.dumps(GOOD))
    rec[section][key] = value
    with pytest.raises(UnreadableRecord) as err:
        check_record(rec, 7)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "rec, message",
    [
        ({**GOOD, "origin": ["baseline"]}, "trial 7: 'origin' must be text"),
        ({**GOOD, "seconds": "1"}, "trial 7: 'seconds' must be a number"),
        ({**GOOD, "measurement": "fits"}, "trial 7 measurement: expected a table"),
        ({**GOOD, "measurement": {"feasible": True}}, "trial 7 measurement: missing key 'source'"),
    ],
)
def test_the_rest_of_a_record_is_checked_too(rec: dict[str, Any], message: str) -> None:
    with pytest.raises(UnreadableRecord, match=message):
        check_record(rec, 7)


def test_a_long_stored_value_is_quoted_short() -> None:
    rec = json.loads(json.dumps(GOOD))
    rec["measurement"]["source"] = "x" * 10_000
    with pytest.raises(UnreadableRecord) as err:
        check_record(rec, 7)
    assert len(str(err.value)) < 200


def test_terminal_text_shows_every_control_character_escaped() -> None:
    text = "a\x1b[31mb\x1b]0;title\x07c\nd\te\x9bf\x7fg\u202eh\u2028i\x00"
    out = terminal_text(text)
    assert out == "a\\x1b[31mb\\x1b]0;title\\x07c\\nd\\te\\x9bf\\x7fg\\u202eh\\u2028i\\x00"
    assert out.isprintable() and terminal_text(out) == out  # applying it twice changes nothing
    assert terminal_text("résumé ★ 16.16") == "résumé ★ 16.16"
    assert (
        terminal_cell("[link=https://e.example]x[/link]").plain
        == "[link=https://e.example]x[/link]"
    )


def test_html_text_leaves_no_markup_and_no_handler_or_script_url() -> None:
    out = html_text("<img src=x onerror=\"alert(1)\">javascript:alert('x')&\x1b")
    assert out == (
        "&lt;img src&#61;x onerror&#61;&#34;alert(1)&#34;&gt;javascript&#58;alert(&#39;x&#39;)"
        "&amp;\\x1b"
    )
    assert not any(c in out for c in "<>\"'") and "=" not in out and ":" not in out
