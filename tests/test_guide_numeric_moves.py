"""The guide moves the numeric modes alone (issue 58): the estimator sees neither speed nor
memory in stochastic rounding or loss scaling, so no climb takes them, but where the space
holds them an IPU nobody modelled may run one value faster (guide/single_changes.py)."""

from __future__ import annotations

from ipu_autotune.guide.pairs import changes
from ipu_autotune.guide.single_changes import single_changes
from ipu_autotune.problem import Config, Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace

CNN = Problem("resnet18", 4, (3, 32, 32), num_classes=10, ipus=4)


def _alone(config: Config, knob: str) -> list[object]:
    """The values single changes of `config` (in the default space) give `knob` while
    changing nothing else; each in the space when `config` is."""
    space, profile = SearchSpace.load(CNN), profile_for(CNN)
    inside = not space.outside(CNN, profile, config)
    out = []
    for name, moved in single_changes(space, CNN, profile, config):
        delta = changes(config, moved)
        if name == knob and set(delta) == {knob}:
            assert not inside or not space.outside(CNN, profile, moved)
            out.append(delta[knob])
    return out


def test_fp16_weights_move_stochastic_rounding_and_every_loss_scale_alone() -> None:
    space, profile = SearchSpace.load(CNN), profile_for(CNN)
    half = space.project(
        CNN, profile, Config(precision="16.16", stochastic_rounding=True, loss_scaling=1024.0)
    )
    assert not space.outside(CNN, profile, half)
    assert _alone(half, "stochastic_rounding") == [False]
    scales = _alone(half, "loss_scaling")
    assert 1024.0 not in scales and {1.0, 128.0, 8192.0, "auto"} <= set(scales)


def test_fp32_weights_have_no_rounding_and_fp32_compute_no_loss_scale() -> None:
    # "auto" needs FP16 weights (search/space.py samples it only there); FP16 compute with
    # FP32 weights is outside the default space, but a user's space may hold it
    mixed = Config(precision="16.32", loss_scaling=128.0)
    assert _alone(mixed, "stochastic_rounding") == []
    assert "auto" not in _alone(mixed, "loss_scaling") and 1.0 in _alone(mixed, "loss_scaling")
    full = Config(precision="32.32")
    assert _alone(full, "stochastic_rounding") == [] and _alone(full, "loss_scaling") == []
