"""Any Hugging Face architecture from its config.json (issue 23, must-show 1).

Each family's model is built from a config.json this test writes (small sizes, no network,
no weights): it tunes from an out-of-memory baseline to a fitting config, and the best
config's snippet runs on the fake SDK, next to an optimum-graphcore IPUConfig.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest_fake_sdk import fake_sdk
from testing import not_none

from ipu_autotune.cli import main
from ipu_autotune.errors import UsageError
from ipu_autotune.export.ipu_config import IPU_CONFIG_FIELDS
from ipu_autotune.models.hf import build_hf_model, layer_count, layer_stacks
from ipu_autotune.problem import Problem, load_config_file
from ipu_autotune.profiles.trace import profile_for

HIDDEN, LAYERS, HEADS, FFN, VOCAB = 256, 4, 4, 1024, 8000
_BERT_LIKE = dict(
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
    vocab_size=VOCAB,
)
#: family -> config.json, the keys as each family's published checkpoints spell them
CONFIGS = {
    "bert": dict(model_type="bert", max_position_embeddings=512, **_BERT_LIKE),
    "roberta": dict(
        model_type="roberta",
        max_position_embeddings=514,
        pad_token_id=1,
        type_vocab_size=1,
        **_BERT_LIKE,
    ),
    # DeBERTa v1 (microsoft/deberta-base's keys): the DeBERTa optimum-graphcore pipelines
    "deberta": dict(
        model_type="deberta",
        max_position_embeddings=512,
        relative_attention=True,
        pos_att_type=["c2p", "p2c"],
        position_biased_input=False,
        max_relative_positions=-1,
        type_vocab_size=0,
        **_BERT_LIKE,
    ),
    "deberta_v2": dict(
        model_type="deberta-v2",
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=64,
        pos_att_type=["p2c", "c2p"],
        **_BERT_LIKE,
    ),
    "gpt2": dict(
        model_type="gpt2",
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        vocab_size=VOCAB,
        n_positions=1024,
    ),
    "llama": dict(
        model_type="llama", num_key_value_heads=2, max_position_embeddings=1024, **_BERT_LIKE
    ),
    "gpt_neox": dict(model_type="gpt_neox", max_position_embeddings=1024, **_BERT_LIKE),
    "t5": dict(
        model_type="t5",
        d_model=HIDDEN,
        d_ff=FFN,
        d_kv=64,
        num_layers=LAYERS,
        num_decoder_layers=2,
        num_heads=HEADS,
        vocab_size=VOCAB,
        decoder_start_token_id=0,
        pad_token_id=0,
    ),
    "bart": dict(
        model_type="bart",
        d_model=HIDDEN,
        encoder_layers=LAYERS,
        decoder_layers=2,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN,
        vocab_size=VOCAB,
        max_position_embeddings=1024,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    ),
    "vit": dict(
        model_type="vit",
        image_size=224,
        patch_size=16,
        num_channels=3,
        **{k: v for k, v in _BERT_LIKE.items() if k != "vocab_size"},
    ),
}
#: family -> (default task, repeated blocks: encoder and decoder for seq2seq)
EXPECTED = {
    "bert": ("sequence-classification", 4),
    "roberta": ("sequence-classification", 4),
    "deberta": ("sequence-classification", 4),
    "deberta_v2": ("sequence-classification", 4),
    "gpt2": ("causal-lm", 4),
    "llama": ("causal-lm", 4),
    "gpt_neox": ("causal-lm", 4),
    "t5": ("seq2seq-lm", 6),
    "bart": ("seq2seq-lm", 6),
    "vit": ("image-classification", 4),
}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: the Hub is off for transformers, and any connection attempt fails the test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def write_config(tmp_path: Path, family: str) -> str:
    folder = tmp_path / family
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIGS[family]))
    return f"hf:{folder}"


@pytest.mark.parametrize("family", list(CONFIGS))
def test_each_family_builds_from_its_config_with_its_layers_found(
    tmp_path: Path, family: Any
) -> None:
    model = write_config(tmp_path, family)
    task, blocks = EXPECTED[family]
    problem = Problem(model, 2, seq_len=0 if family == "vit" else 64)
    assert problem.task == task
    stacks = layer_stacks(model, task)
    built = build_hf_model(model, task, problem.num_classes)
    modules = dict(built.named_modules())
    assert all(isinstance(modules[s], torch.nn.ModuleList) for s in stacks)
    assert len(stacks) == (2 if task == "seq2seq-lm" else 1)
    assert layer_count(model) == blocks
    # Every block is a unit of the trace (a place a pipeline stage may begin) and every
    # parameter is counted once, tied ones included.
    profile = profile_for(problem)
    units = {u.path for u in profile.units}
    assert all(f"{s}.{i}" in units for s in stacks for i in range(len(modules[s])))
    assert profile.params == sum(p.numel() for p in built.parameters())


def test_a_tied_lm_head_is_found_from_the_model_not_the_name(tmp_path: Path) -> None:
    """GPT-2 ties its head to the token embedding (it runs on IPU0); LLaMA's config unties it."""
    for family, tied in (("gpt2", True), ("llama", False)):
        profile = profile_for(Problem(write_config(tmp_path, family), 2, seq_len=64))
        head = next(u for u in profile.units if u.path == "lm_head")
        assert (head.placed_with == 0) == tied and (head.params == 0) == tied, family


@pytest.mark.slow
def test_seq2seq_decoder_runs_at_its_own_length(tmp_path: Path) -> None:
    """T5 and BART: the decoder's activations follow --decoder-seq-len (default min(seq_len, 128)),
    the encoder's follow --seq-len."""
    for family in ("t5", "bart"):
        model = write_config(tmp_path, family)
        long_decoder = Problem(model, 2, seq_len=512, decoder_seq_len=512)
        default = Problem(model, 2, seq_len=512)
        assert (
            default.decoder_seq_len == 128 and Problem(model, 2, seq_len=64).decoder_seq_len == 64
        )
        encoder, decoder = layer_stacks(model, "seq2seq-lm")
        by_path = [{u.path: u for u in profile_for(p).units} for p in (long_decoder, default)]
        assert by_path[0][f"{encoder}.1"].saved_bytes == by_path[1][f"{encoder}.1"].saved_bytes
        assert by_path[0][f"{decoder}.1"].saved_bytes > 3 * by_path[1][f"{decoder}.1"].saved_bytes
        assert "dsl512" in long_decoder.slug and "dsl" not in default.slug


def test_input_shape_on_a_token_model_is_its_sequence_length(tmp_path: Path) -> None:
    model = write_config(tmp_path, "gpt2")
    assert Problem(model, 1, input_shape=(1024,)).seq_len == 1024
    assert Problem("hf:gpt2", 1, input_shape=(1024,)).seq_len == 1024  # tabulated names too
    with pytest.raises(UsageError, match="disagree; give --seq-len only"):
        Problem(model, 1, input_shape=(1024,), seq_len=128)


@pytest.mark.slow
def test_flags_over_a_config_file_change_the_sequence_without_a_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stored hf: problem keeps its shape as [seq_len]: --seq-len, --input-shape and --task
    on top of it replace the file's tokens (and the decoder's default follows), never clash."""
    model = write_config(tmp_path, "t5")
    config = tmp_path / "t5.toml"
    config.write_text(
        f'[problem]\nmodel = "{model}"\nbatch_size = 1\nseq_len = 64\ninput_shape = [64]\n'
        "decoder_seq_len = 64\n[config]\n"
    )
    for flags, seq_len, decoder in (
        (("--seq-len", "512"), 512, 128),
        (("--input-shape", "256"), 256, 128),
        (("--decoder-seq-len", "32"), 64, 32),
        ((), 64, 64),
    ):
        assert main(["estimate", "--config", str(config), *flags, "--json"]) == 0
        problem = json.loads(capsys.readouterr().out)["problem"]
        assert (problem["seq_len"], problem["input_shape"], problem["decoder_seq_len"]) == (
            seq_len,
            [seq_len],
            decoder,
        )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("hf:facebook/bart-base", "-b", "1"),
            "huggingface-cli download facebook/bart-base config.json",
        ),
        (("hf:gpt2", "-b", "1", "--input-shape", "1024", "--seq-len", "128"), "disagree"),
        (("hf:gpt2", "-b", "1", "--input-shape", "3,224,224"), "takes token ids"),
        (
            ("hf:gpt2", "-b", "1", "--decoder-seq-len", "64"),
            "--decoder-seq-len is for --task seq2seq-lm",
        ),
        (("hf:FOLDER/vit", "-b", "1", "--image-size", "32"), "takes 3x224x224 images"),
        (("hf:FOLDER/vit", "-b", "1", "--seq-len", "32"), "reads images, not tokens"),
        (("hf:FOLDER/empty", "-b", "1"), "the folder has no config.json"),
        (("hf:FOLDER/unknown", "-b", "1"), "model_type 'no-such-model' in"),
        (("hf:FOLDER/broken", "-b", "1"), "is not readable JSON"),
        (
            ("hf:FOLDER/t5", "-b", "1", "--task", "causal-lm"),
            "has no causal-lm head; use --task seq2seq-lm",
        ),
    ],
)
def test_bad_hf_input_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[Any, ...],
    message: str,
) -> None:
    monkeypatch.setenv(
        "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache")
    )  # not the machine's own cache
    write_config(tmp_path, "vit")
    write_config(tmp_path, "t5")
    (tmp_path / "empty").mkdir()
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "config.json").write_text('{"model_type": "no-such-model"}')
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "bert",')
    argv = [a.replace("FOLDER", str(tmp_path)) for a in args]
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def fake_hub_cache(
    root: Any,
    repo_id: str,
    config: dict[str, Any],
    revision: str = "0123456789abcdef0123456789abcdef01234567",
) -> None:
    """The layout `huggingface-cli download` leaves: models--ORG--NAME/refs/main naming a
    snapshot whose config.json links to a blob."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "blobs").mkdir()
    blob = repo / "blobs" / "c0ffee"
    blob.write_text(json.dumps(config))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(blob)


def test_an_untabulated_name_is_read_from_the_local_hub_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """hf:ORG/NAME already downloaded: its config.json comes from HF_HUB_CACHE, no network (any
    connect fails the test); a name not in the cache is the one-line error, naming the cache."""
    cache = tmp_path / "hub"
    fake_hub_cache(cache, "my-org/tiny-bart", CONFIGS["bart"])
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert main(["estimate", "hf:my-org/tiny-bart", "-b", "1", "--seq-len", "64", "--json"]) == 0
    problem = json.loads(capsys.readouterr().out)["problem"]
    assert problem["task"] == "seq2seq-lm" and layer_count("hf:my-org/tiny-bart") == 4 + 2
    assert main(["estimate", "hf:my-org/not-downloaded", "-b", "1"]) == 2
    err = capsys.readouterr().err
    assert f"not in the Hugging Face cache {cache}" in err and "huggingface-cli download" in err
    assert len(err.strip().splitlines()) == 1, err


# --- must show 1: each family tunes from out of memory to a fit, and its exports run ---------

#: family -> its problem's flags: micro-batch and sequence length big enough that the FP32
#: baseline split over 2 IPUs is out of memory on the estimator
TUNED: dict[str, tuple[str, ...]] = {
    family: ("--batch-size", "16", "--seq-len", "512") for family in CONFIGS
}
TUNED["vit"] = ("--batch-size", "64")


@pytest.fixture(scope="module")
def poptorch() -> Iterator[Any]:
    with fake_sdk() as module:
        yield module


#: families whose (family, task) optimum-graphcore registers no pipelined class for
#: (rules/optimum_target.PIPELINED): they tune for PopTorch, and --trainer optimum is refused
POPTORCH_ONLY = {"deberta_v2": "deberta-v2", "llama": "llama", "gpt_neox": "gpt_neox"}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(CONFIGS))
def test_must_show_each_family_tunes_from_oom_to_a_fit_and_exports_run(
    poptorch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], family: Any
) -> None:
    model = write_config(tmp_path, family)
    storage, out = f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "out"
    optimum = family not in POPTORCH_ONLY
    if not optimum:
        refuse_optimum(tmp_path, capsys, model, family)
    # --trainer optimum: the search keeps to what an IPUConfig can express (issue 24), so the
    # best exports as one, for every family optimum pipelines (T5's stages begin at its blocks;
    # ViT is optimum-graphcore's PipelinedViTForImageClassification).
    assert (
        main(
            [
                model,
                *TUNED[family],
                "--trials",
                "8",
                "--seed",
                "0",
                "--no-numerics",
                "--json",
                *(("--trainer", "optimum") if optimum else ()),
                "--backend",
                "estimate",
                "--storage",
                storage,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    base, best = result["baseline"], result["best"]
    problem = not_none(load_config_file(out / "best.toml").problem)
    assert base["measurement"]["failure"] == "oom" and not base["measurement"]["feasible"]
    assert best is not None and best["measurement"]["feasible"]
    assert best["measurement"]["throughput"] > base["measurement"]["throughput"]
    if optimum:
        # Stages begin where optimum's layers_per_ipu can begin them: at a repeated layer.
        stacks = layer_stacks(model, problem.task)
        assert all(
            p.rsplit(".", 1)[0] in stacks
            for p in base["config"]["splits"] + best["config"]["splits"]
        )

    # The IPUConfig: only keys optimum-graphcore's IPUConfig takes; every repeated layer placed.
    # None for a model IPUTrainer cannot pipeline, even from the PopTorch study.
    ipu_config = [
        "export",
        "--study",
        result["study"],
        "--storage",
        storage,
        "--format",
        "ipu-config",
        "-o",
        str(tmp_path / "ipu_config.json"),
    ]
    if optimum:
        assert main(ipu_config) == 0
        check_ipu_config(tmp_path, out, family, best)
    else:
        assert main(ipu_config) == 2
        assert "optimum-graphcore pipelines no" in capsys.readouterr().err
        assert (
            not (tmp_path / "ipu_config.json").exists() and not (out / "ipu_config.json").exists()
        )
        assert not (out / "train_with_optimum.py").exists()
        refused = (out / "ipu_config_refused.txt").read_text()
        assert f"pipelines no {POPTORCH_ONLY[family]} {EXPECTED[family][0]} model" in refused
        assert "--trainer optimum" not in refused  # tuning with it would not help

    # The baseline's snippet (pipelined over 2 IPUs) and the best's, each on the fake SDK.
    assert (
        main(
            [
                "export",
                "--study",
                result["study"],
                "--storage",
                storage,
                "--trial",
                "0",
                "-o",
                str(tmp_path / "baseline.py"),
            ]
        )
        == 0
    )
    for snippet, config in (
        (out / "best_options.py", best["config"]),
        (tmp_path / "baseline.py", base["config"]),
    ):
        run_snippet(poptorch, snippet.read_text(), model, problem, config)


def refuse_optimum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, family: str
) -> None:
    """--trainer optimum on a model optimum-graphcore does not pipeline: one line, exit 2, before
    anything is traced or stored (no study, no output folder)."""
    storage, out = tmp_path / "refused.sqlite", tmp_path / "refused"
    assert (
        main(
            [
                model,
                *TUNED[family],
                "--trials",
                "8",
                "--trainer",
                "optimum",
                "--backend",
                "estimate",
                "--storage",
                f"sqlite:///{storage}",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    task = EXPECTED[family][0]
    assert (
        f"--trainer optimum on '{model}': optimum-graphcore pipelines no {POPTORCH_ONLY[family]} "
        f"{task} model" in err
    )
    assert (
        "it pipelines bert (" in err
        and "deberta (" in err
        and "Drop --trainer optimum to tune for PopTorch" in err
    )
    assert len(err.splitlines()) == 1, err
    assert not storage.exists() and not out.exists()


def check_ipu_config(tmp_path: Path, out: Any, family: str, best: dict[str, Any]) -> None:
    ipu_config = json.loads((tmp_path / "ipu_config.json").read_text())
    assert json.loads((out / "ipu_config.json").read_text()) == ipu_config
    assert set(ipu_config) <= IPU_CONFIG_FIELDS
    assert sum(ipu_config["layers_per_ipu"]) == EXPECTED[family][1]
    assert (
        len(ipu_config["layers_per_ipu"])
        == ipu_config["ipus_per_replica"]
        == best["config"]["ipus_per_replica"]
        == len(ipu_config["matmul_proportion"])
    )
    assert ipu_config["gradient_accumulation_steps"] == best["config"]["gradient_accumulation"]


def run_snippet(
    poptorch: Any, source: str, model: str, problem: Problem, config: dict[str, Any]
) -> None:
    """The exported annotate/TrainingModel/options on the fake PopTorch, then one training
    forward on the CPU (FP32: the CPU runs the annotated model, not the IPU's FP16)."""
    ns: dict[str, Any] = {}
    exec(compile(source, "best_options.py", "exec"), ns)
    ns["INPUT_DTYPE"] = torch.float
    task = problem.task
    built = build_hf_model(model, task, problem.num_classes, device="cpu")
    training = ns["TrainingModel"](built)
    opts = ns["make_options"]()
    assert poptorch.trainingModel(training, opts, ns["make_optimizer"](training)) is not None
    assert opts.Training.gradient_accumulation == config["gradient_accumulation"]
    for path in config["splits"]:  # BeginBlock found each split's module in the user's model
        assert built.get_submodule(path) is not None
    training.float()
    if task == "image-classification":
        dtype = torch.uint8 if config["eight_bit_io"] else torch.float
        images = torch.zeros(2, *problem.input_shape, dtype=dtype)
        logits, loss = training(images, torch.zeros(2, dtype=torch.long))
        assert tuple(logits.shape) == (2, problem.num_classes)
    else:
        ids = torch.zeros(2, 16, dtype=torch.long)
        labels = (
            torch.zeros(2, dtype=torch.long)
            if task == "sequence-classification"
            else torch.zeros(2, 8 if task == "seq2seq-lm" else 16, dtype=torch.long)
        )
        loss = training(ids, torch.ones_like(ids), labels)
    assert loss.dim() == 0 and torch.isfinite(loss)
