"""Properties, with hypothesis choosing every answer the sampler could give.

- Every config a shipped search space (default.toml + cnn.toml / transformer.toml, as
  `SearchSpace.load` merges them) produces passes the rules, for CNNs and transformers, with
  and without a fixed global batch, for 1 to 16 IPUs; also with the numerics knobs fixed.
- The estimator never raises, and never returns NaN, infinite or negative figures, on them.
- Problem and Config survive TOML (tomlio.dumps + load_config_file) and JSON unchanged.

Models are traced once (profile_for caches); example counts stay modest (< 60 s in all).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypeGuard

import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st
from testing import not_none

from ipu_autotune.backends.estimate import estimate
from ipu_autotune.export import tomlio
from ipu_autotune.knob_spec import EXECUTIONS, PARTIALS, PRECISIONS, RECOMPUTE_MODES, STATE_DTYPES
from ipu_autotune.parsing import OPTIMIZERS, TARGETS
from ipu_autotune.problem import Config, Problem, load_config_file
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.rules.cross_field import violations
from ipu_autotune.search.space import SearchSpace

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

# (model, micro-batch, input shape, global batch): CNN and transformer families.
MODELS = [("resnet18", 8, (3, 64, 64)), ("vit_b_16", 4, (3, 224, 224))]
IPUS = (1, 2, 4, 8, 16)
TARGET_NAMES = TARGETS


class HypothesisTrial:
    """An Optuna-trial stand-in whose every suggest_* answer is drawn by hypothesis."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.params: dict[str, Any] = {}

    def suggest_categorical(self, name: Any, choices: Any) -> Any:
        value = self.data.draw(st.sampled_from(list(choices)), label=name)
        self.params[name] = value
        return value

    def suggest_int(self, name: Any, low: Any, high: Any, log: Any = False, step: Any = 1) -> Any:
        step = step or 1
        value = low + step * self.data.draw(st.integers(0, (high - low) // step), label=name)
        self.params[name] = value
        return value

    def suggest_float(
        self, name: Any, low: Any, high: Any, log: Any = False, step: Any = None
    ) -> Any:
        if step:
            value = low + step * self.data.draw(
                st.integers(0, int(round((high - low) / step))), label=name
            )
            value = min(value, high)
        else:
            value = self.data.draw(st.floats(low, high, allow_nan=False), label=name)
        self.params[name] = value
        return value


@st.composite
def problems(draw: Any) -> Any:
    model, batch, shape = draw(st.sampled_from(MODELS))
    ipus = draw(st.sampled_from(IPUS))
    global_batch = draw(
        st.one_of(st.none(), st.sampled_from([batch * k for k in (1, 3, 8, 16, 64, 96)]))
    )
    return Problem(
        model,
        batch,
        input_shape=shape,
        ipus=ipus,
        target=draw(st.sampled_from(TARGET_NAMES)),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        global_batch=global_batch,
        num_classes=10,
    )


def finite_non_negative(x: object) -> TypeGuard[float]:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


@pytest.fixture(scope="module", autouse=True)
def traced() -> None:
    for model, batch, shape in MODELS:  # trace outside hypothesis' deadline, once
        profile_for(Problem(model, batch, input_shape=shape, num_classes=10))


@pytest.mark.slow
@given(problems(), st.booleans(), st.data())
@SETTINGS
def test_every_config_a_shipped_space_produces_passes_the_rules_and_estimates_sanely(
    problem: Any, fixed_numerics: Any, data: Any
) -> None:
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    if fixed_numerics:  # what `tune` searches when the numerics advice sets these knobs
        space = space.without("loss_scaling", "stochastic_rounding", "partials")
    assume(space.ipu_layouts(problem, profile))  # else `tune` refuses the problem as bad input
    config = space.sample(HypothesisTrial(data), problem, profile)
    event(
        f"{problem.model}, {config.ipus_per_replica} IPU(s) x {config.replicas}, "
        f"{config.execution}"
    )

    assert violations(problem, config, profile.module_order) == [], config

    m = estimate(problem, config, profile)
    n = config.ipus_per_replica
    assert len(m.required_bytes) == len(m.max_tile_bytes) == len(m.breakdown) == n
    for value in [
        *m.required_bytes,
        *m.max_tile_bytes,
        *m.capacity_bytes,
        m.overflow_bytes,
        m.tile_capacity_bytes,
    ]:
        assert finite_non_negative(value), m
    for parts in m.breakdown:
        assert all(finite_non_negative(v) for v in parts.values()), parts
    assert finite_non_negative(m.throughput) and m.throughput > 0, m
    assert finite_non_negative(m.step_time_s) and m.step_time_s > 0, m
    assert math.isfinite(m.violation)
    assert m.feasible == (m.failure is None) and m.failure in (None, "oom")
    json.dumps(m.to_dict(), allow_nan=False)  # storable as an Optuna user attribute


# --- TOML and JSON round trips -------------------------------------------------------------------

# Module paths and model names as users write them (identifiers, dots, digits; a factory).
IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
PATHS = st.lists(IDENT, min_size=1, max_size=4).map(".".join)
MODEL_NAMES = st.one_of(
    st.sampled_from(["resnet50", "vit_b_16", "efficientnet_b0"]),
    st.tuples(PATHS, IDENT).map(lambda t: f"{t[0]}:{t[1]}"),
)
POSITIVE = st.integers(1, 10**6)
FRACTIONS = st.floats(0.0, 1.0, exclude_min=True, allow_nan=False)
SCALES = st.one_of(st.just("auto"), st.floats(1e-6, 1e12, allow_nan=False, allow_infinity=False))


@st.composite
def any_problem(draw: Any) -> Any:
    return Problem(
        model=draw(MODEL_NAMES),
        batch_size=draw(POSITIVE),
        input_shape=tuple(draw(st.lists(st.integers(1, 4096), min_size=1, max_size=4))),
        num_classes=draw(POSITIVE),
        optimizer=draw(st.sampled_from(OPTIMIZERS)),
        ipus=draw(st.integers(1, 64)),
        target=draw(st.sampled_from(TARGETS)),
        global_batch=draw(st.one_of(st.none(), POSITIVE)),
    )


@st.composite
def any_config(draw: Any, paths: Any = PATHS) -> Any:
    ipr = draw(st.integers(1, 16))
    return Config(
        precision=draw(st.sampled_from(PRECISIONS)),
        partials=draw(st.sampled_from(PARTIALS)),
        stochastic_rounding=draw(st.booleans()),
        loss_scaling=draw(SCALES),
        optimizer_state=draw(st.sampled_from(STATE_DTYPES)),
        ipus_per_replica=ipr,
        replicas=draw(st.integers(1, 64)),
        splits=tuple(draw(st.lists(paths, max_size=ipr))),
        execution=draw(st.sampled_from(EXECUTIONS)),
        recompute=draw(st.sampled_from(RECOMPUTE_MODES)),
        checkpoints=tuple(draw(st.lists(paths, max_size=5))),
        available_memory_proportion=tuple(draw(st.lists(FRACTIONS, min_size=1, max_size=ipr))),
        optimizer_offload=draw(st.booleans()),
        replicated_tensor_sharding=draw(st.booleans()),
        gradient_accumulation=draw(POSITIVE),
        device_iterations=draw(POSITIVE),
        eight_bit_io=draw(st.booleans()),
        io_tiles=draw(st.integers(0, 512)),
    )


def toml_round_trip(tmp_path: Path, problem: Problem, config: Config) -> tuple[Problem, Config]:
    path = tmp_path / "round.toml"
    path.write_text(
        tomlio.dumps(
            {"problem": problem.to_dict(), "config": config.to_dict()},
            header="round trip\nsecond line",
        )
    )
    loaded = load_config_file(path)
    return not_none(loaded.problem), not_none(loaded.config)


@pytest.mark.slow
@given(any_problem(), any_config())
@SETTINGS
def test_toml_round_trip_is_the_identity(tmp_path: Path, problem: Any, config: Any) -> None:
    assert toml_round_trip(tmp_path, problem, config) == (problem, config)


@pytest.mark.slow
@given(any_problem(), any_config())
@SETTINGS
def test_json_round_trip_is_the_identity(problem: Any, config: Any) -> None:
    assert Problem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem
    assert Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.slow
@given(st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sampled_configs_round_trip_through_toml(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    problem = data.draw(problems())
    profile = profile_for(problem)
    space = SearchSpace.load(problem)
    assume(space.ipu_layouts(problem, profile))
    config = space.sample(HypothesisTrial(data), problem, profile)
    assert toml_round_trip(tmp_path_factory.mktemp("rt"), problem, config) == (problem, config)


def test_toml_round_trip_of_any_text(tmp_path: Path) -> None:
    config = Config(ipus_per_replica=2, splits=("layer\U0001d4cd",))
    assert toml_round_trip(tmp_path, Problem("pkg.mod:f\U0001f600ctory", 8), config)[1] == config
