"""A run's options (ipu_autotune/options/): the command line and the Python API build the same
object, with the same checks and messages; the defaults are the fields'; argparse stays in
cli.py and options/parser.py."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import ipu_autotune
from ipu_autotune import cli
from ipu_autotune.errors import UsageError
from ipu_autotune.options import OPTIONS, EstimateOptions, TuneOptions
from ipu_autotune.options.keywords import from_keywords, with_keywords
from ipu_autotune.options.parser import options_from

PACKAGE_DIR = Path(ipu_autotune.__file__).parent


def parsed(argv: list[str]) -> Any:
    return options_from(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "command, model, keywords, argv",
    [
        (
            "tune",
            "resnet18",
            dict(
                batch_size=8,
                input_shape=(3, 32, 32),
                inputs=["a:4:int64", "b:4:bool"],
                micro_batch={"low": 8, "high": 64},
                no_numerics=True,
                headroom=0.1,
                seed=3,
                timeout=5,
                optimizer="sgd",
                target="bow",
                host_memory=2.5,
                quiet=False,
            ),
            "tune resnet18 -b 8 --input-shape 3x32x32 --input a:4:int64 --input b:4:bool "
            "--micro-batch 8-64 --no-numerics --headroom 0.1 --seed 3 --timeout 5 --optimizer "
            "sgd --target bow --host-memory 2.5",
        ),
        (
            "estimate",
            None,
            dict(
                config=Path("c.toml"), set=["precision=16.16", "splits=layer3"], backend="poptorch"
            ),
            "estimate --config c.toml --set precision=16.16 --set splits=layer3 --backend "
            "poptorch",
        ),
        (
            "estimate",
            "resnet18",
            dict(batch_size=2, image_size=32, json=True),
            "estimate resnet18 --batch-size 2 --image-size 32 --json",
        ),
        (
            "verify",
            None,
            dict(tuned="t.toml", steps=10, lr=0.1, quiet=True),
            "verify --tuned t.toml --steps 10 --lr 0.1 -q",
        ),
        (
            "plan",
            "resnet18",
            dict(batch_size=4, fit_confidence=0.5),
            "plan resnet18 -b 4 --fit-confidence 0.5",
        ),
        # a string is read as the flag's text is
        (
            "tune",
            "m",
            dict(batch_size="8", input_shape="3,8,8", micro_batch="search"),
            "tune m -b 8 --input-shape 3,8,8 --micro-batch search",
        ),
    ],
)
def test_the_call_and_the_command_line_build_the_same_options(
    command: str, model: str | None, keywords: Any, argv: str
) -> None:
    assert from_keywords(command, model, keywords) == parsed(argv.split())


@pytest.mark.parametrize(
    "keywords, argv",
    [
        (dict(batch_size=8, seed="a"), "-b 8 --seed a"),
        (dict(batch_size=8, timeout="soon"), "-b 8 --timeout soon"),
        (dict(batch_size=8, task="nope"), "-b 8 --task nope"),
        (
            dict(batch_size=8, input_shape=(3, 8, 8), image_size=8),
            "-b 8 --input-shape 3,8,8 --image-size 8",
        ),
        (
            dict(image_size=8, input_shape=(3, 8, 8), batch_size=8),
            "--image-size 8 --input-shape 3,8,8 -b 8",
        ),
        (dict(trials=3), "--trials 3"),
        (dict(batch_size=8, headroom=0.9), "-b 8 --headroom 0.9"),
        (dict(batch_size=8, micro_batch="9-3"), "-b 8 --micro-batch 9-3"),
        (dict(batch_size=0), "-b 0"),
        (dict(batch_size=8, input_shape=(3, 0, 8)), "-b 8 --input-shape 3,0,8"),
    ],
)
def test_bad_keywords_are_refused_with_the_parsers_message(keywords: Any, argv: str) -> None:
    with pytest.raises(UsageError) as by_parser:
        parsed(["tune", "m", *argv.split()])
    with pytest.raises(UsageError) as by_call:
        from_keywords("tune", "m", keywords)
    assert str(by_call.value).replace("(3, 0, 8)", "'3,0,8'") == str(by_parser.value)
    assert str(by_call.value).startswith("ipu-autotune tune: ") and "\n" not in str(by_call.value)


@pytest.mark.parametrize(
    "keywords, why",
    [
        (dict(batch_size=8.0), "argument --batch-size/-b: expected a whole number, got 8.0"),
        (dict(batch_size=True), "argument --batch-size/-b: expected a whole number, got True"),
        (
            dict(batch_size=8, input_shape=[3, "32", 32]),
            "argument --input-shape: expected C,H,W such as 3,224,224",
        ),
        (
            dict(batch_size=8, no_numerics="yes"),
            "argument --no-numerics: takes True or False, got 'yes'",
        ),
        (dict(batch_size=8, storage=5), "argument --storage: expected text, got 5"),
    ],
)
def test_a_python_value_is_checked_as_a_value_not_as_its_text(keywords: Any, why: str) -> None:
    """The old call wrote each value out as flag text: 8.0 became '8.0' and `str` hid the type.
    Now a value is checked as the value it is."""
    with pytest.raises(UsageError, match=re.escape(why)):
        from_keywords("tune", "m", keywords)


def test_an_options_object_is_checked_when_made_and_keywords_set_its_fields() -> None:
    with pytest.raises(
        UsageError, match=r"ipu-autotune tune: argument --batch-size/-b: must be positive, got 0"
    ):
        TuneOptions(model="m", batch_size=0)
    # text where the field holds a tuple, as a caller's keyword may give it: checked and converted
    base = TuneOptions(batch_size=8, input_shape="3x32x32", trials=5)  # type: ignore[arg-type]
    assert base.input_shape == (3, 32, 32)
    run = with_keywords(TuneOptions, "resnet18", dict(trials=7, seed=1), base)
    assert (run.model, run.batch_size, run.trials, run.seed, run.input_shape) == (
        "resnet18",
        8,
        7,
        1,
        (3, 32, 32),
    )
    assert run == parsed("tune resnet18 -b 8 --input-shape 3,32,32 --trials 7 --seed 1".split())
    with pytest.raises(
        UsageError, match="argument --image-size: not allowed with argument --input-shape"
    ):
        with_keywords(TuneOptions, "resnet18", dict(image_size=32), base)
    with pytest.raises(UsageError, match="options must be a TuneOptions, got EstimateOptions"):
        with_keywords(TuneOptions, "resnet18", {}, EstimateOptions())


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_the_parsers_defaults_are_the_fields(command: Any) -> None:
    cls = OPTIONS[command]
    required = {
        "tune": ["m", "-b", "8"],
        "plan": ["m", "-b", "8"],
        "numerics": ["m", "-b", "8"],
        "export": ["--study", "s"],
        "show": ["--study", "s"],
        "report": ["--study", "s"],
    }.get(command, [])
    given = parsed([command, *required])
    for f in fields(cls):
        if f.name not in ("model", "batch_size", "study"):
            assert getattr(given, f.name) == f.default, (command, f.name)


def test_argparse_internals_and_getattr_on_args_stay_in_cli_and_the_parser() -> None:
    pattern = re.compile(r"_actions|_SubParsersAction|getattr\(args")
    found = [
        f"{p.relative_to(PACKAGE_DIR)}:{n}"
        for p in sorted(PACKAGE_DIR.rglob("*.py"))
        if str(p.relative_to(PACKAGE_DIR)) not in ("cli.py", "options/parser.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
