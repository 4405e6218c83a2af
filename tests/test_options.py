"""A run's options (ipu_autotune/options.py): the command line and the Python API build the same
object, with the same checks and messages; the defaults are the fields'; argparse stays in
cli.py and args.py."""

from __future__ import annotations

from typing import Any

import re
from dataclasses import fields
from pathlib import Path

import pytest

import ipu_autotune
from ipu_autotune import cli
from ipu_autotune.args import options_from
from ipu_autotune.errors import UsageError
from ipu_autotune.options import OPTIONS, from_keywords, to_argv

PACKAGE_DIR = Path(ipu_autotune.__file__).parent


def parsed(command: str, model: str | None, keywords: dict[str, Any]) -> Any:
    argv = to_argv(command, model, keywords)
    return options_from(cli.build_parser().parse_args(argv), argv)


@pytest.mark.parametrize("command, model, keywords", [
    ("tune", "resnet18", dict(batch_size=8, input_shape=(3, 32, 32), inputs=["a:4:int64", "b:4:bool"],
                              micro_batch={"low": 8, "high": 64}, no_numerics=True, headroom=0.1, seed=3,
                              timeout=5, optimizer="sgd", target="bow", host_memory=2.5, quiet=False)),
    ("estimate", None, dict(config="c.toml", set=["precision=16.16", "splits=layer3"], backend="poptorch")),
    ("estimate", "resnet18", dict(batch_size=2, image_size=32, json=True)),
    ("verify", None, dict(tuned="t.toml", steps=10, lr=0.1, quiet=True)),
    ("plan", "resnet18", dict(batch_size=4, fit_confidence=0.5)),
])
def test_the_call_and_the_command_line_build_the_same_options(command: str, model: str | None, keywords: Any) -> None:
    assert from_keywords(command, model, keywords) == parsed(command, model, keywords)


@pytest.mark.parametrize("keywords", [
    dict(batch_size=8, seed="a"), dict(batch_size=8, timeout="soon"), dict(batch_size=8, task="nope"),
    dict(batch_size=8, input_shape=(3, 8, 8), image_size=8), dict(image_size=8, input_shape=(3, 8, 8), batch_size=8),
    dict(trials=3), dict(batch_size=8, headroom=0.9), dict(batch_size=8, micro_batch="9-3"),
])
def test_bad_keywords_are_refused_with_the_parsers_message(keywords: Any) -> None:
    with pytest.raises(UsageError) as by_parser:
        parsed("tune", "m", keywords)
    with pytest.raises(UsageError) as by_call:
        from_keywords("tune", "m", keywords)
    assert str(by_call.value) == str(by_parser.value)
    assert str(by_call.value).startswith("ipu-autotune tune: ") and "\n" not in str(by_call.value)


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_the_parsers_defaults_are_the_fields(command: Any) -> None:
    cls = OPTIONS[command]
    required = {"tune": ["m", "-b", "8"], "plan": ["m", "-b", "8"], "numerics": ["m", "-b", "8"],
                "export": ["--study", "s"], "show": ["--study", "s"], "report": ["--study", "s"]}.get(command, [])
    argv = [command, *required]
    given = options_from(cli.build_parser().parse_args(argv), argv)
    for f in fields(cls):
        if f.name not in ("model", "batch_size", "study", "argv"):
            assert getattr(given, f.name) == f.default, (command, f.name)


def test_argparse_internals_and_getattr_on_args_stay_in_cli_and_args() -> None:
    pattern = re.compile(r"_actions|_SubParsersAction|getattr\(args")
    found = [f"{p.relative_to(PACKAGE_DIR)}:{n}" for p in sorted(PACKAGE_DIR.rglob("*.py"))
             if p.name not in ("cli.py", "args.py") or p.parent != PACKAGE_DIR
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
