"""`rtc export`: a checkpoint trained through the SDK on `rtc serve` comes out as a PEFT adapter (and
as merged weights) that gives the server's own logprobs; bad input fails cleanly and writes nothing.

The hosted path is exercised with its SDK calls replaced by small stand-ins that serve Tinker-style
adapter files (built from a real local checkpoint) over file:// URLs: the download, the conversion
from Tinker's names and the clean-up of the temporary export are real; the Tinker service is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from tinker import types
from tiny_kit import next_token_datum

from rtc.cli import cli
from rtc.errors import RtcError, UsageError
from rtc.export import Adapter, export_checkpoint, merge_adapter, vllm_report

ADAM = types.AdamParams(learning_rate=0.02, beta1=0.9, beta2=0.95, eps=1e-8)
PROBE = "What is 12 * 7? The answer is 84. Once upon a time there was a small model."
TOLERANCE = 1e-4


@dataclass(frozen=True)
class Trained:
    sampler_path: str
    state_path: str
    probe: list[int]
    logprobs: torch.Tensor  # the server's, for probe[1:]
    base_logprobs: torch.Tensor


def rtc(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def trained(service, tokenizer, sentence) -> Trained:
    """Four SFT steps on the tiny model through the SDK, saved both ways, scored by the server."""
    client = service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8, seed=5).result()
    for _ in range(4):
        fb = client.forward_backward([next_token_datum(sentence)], "cross_entropy")
        optim = client.optim_step(ADAM)
        fb.result()
        optim.result()
    sampler_path = client.save_weights_for_sampler("export-final").result().path
    state_path = client.save_state("export-final").result().path
    probe = tokenizer.encode(PROBE)
    prompt = types.ModelInput.from_ints(probe)
    trained_lp = (
        service.create_sampling_client(model_path=sampler_path).result().compute_logprobs(prompt).result()
    )
    base_lp = (
        service.create_sampling_client(base_model="Qwen/Qwen3-8B").result().compute_logprobs(prompt).result()
    )
    return Trained(sampler_path, state_path, probe, torch.tensor(trained_lp[1:]), torch.tensor(base_lp[1:]))


def logprobs_of(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)[:-1].gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]


def load_base(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def peft_logprobs(base_dir: Path, adapter_dir: Path, tokens: list[int]) -> torch.Tensor:
    from peft import PeftModel

    return logprobs_of(PeftModel.from_pretrained(load_base(base_dir), str(adapter_dir)).eval(), tokens)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ---- the round trip (the "done when") --------------------------------------------------


def test_adapter_loads_in_peft_and_gives_the_servers_logprobs(server, tiny_dir, trained, tmp_path):
    out = tmp_path / "adapter"
    result = rtc("export", trained.sampler_path, "-o", out, "--state-dir", server.state_dir)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"wrote {out}: PEFT LoRA adapter (r=8, alpha=32, 15 modules")
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_dir)
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (8, 32, "CAUSAL_LM")
    # Only LoRA matrices: peft's copy of the frozen lm_head it wraps is the base model's, not the adapter's.
    assert all(".lora_A." in k or ".lora_B." in k for k in load_file(str(out / "adapter_model.safetensors")))
    assert "Qwen/Qwen3-8B" in (out / "README.md").read_text()  # the name the run asked for

    exported = peft_logprobs(tiny_dir, out, trained.probe)
    assert (trained.logprobs - trained.base_logprobs).abs().max() > 1e-2  # training moved the model
    assert (exported - trained.logprobs).abs().max() < TOLERANCE


def test_state_checkpoint_exports_the_same_adapter(server, trained, tmp_path):
    for path, out in ((trained.sampler_path, tmp_path / "a"), (trained.state_path, tmp_path / "b")):
        result = rtc("export", path, "-o", out, "--state-dir", server.state_dir)
        assert result.exit_code == 0, result.output
    a = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "b" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_merged_model_loads_with_transformers_and_gives_the_servers_logprobs(server, trained, tmp_path):
    out = tmp_path / "merged"
    result = rtc("export", trained.sampler_path, "--merge", "-o", out, "--state-dir", server.state_dir)
    assert result.exit_code == 0, result.output
    assert "merged model" in result.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= {
        p.name for p in out.iterdir()
    }
    assert not (out / "adapter_config.json").exists()
    merged = logprobs_of(load_base(out), trained.probe)
    assert (merged - trained.logprobs).abs().max() < TOLERANCE


def test_merge_unties_an_lm_head_shared_with_the_embeddings(tiny_dir, tokenizer, tmp_path):
    """SmolLM2 ties lm_head to embed_tokens; a LoRA on lm_head must not leak into the input embeddings."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(tiny_dir))
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    tied_dir = tmp_path / "tied"
    AutoModelForCausalLM.from_config(config).save_pretrained(str(tied_dir))
    tokenizer.save_pretrained(str(tied_dir))
    base = load_base(tied_dir)
    assert base.lm_head.weight is base.get_input_embeddings().weight
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)  # peft starts B at zero: make the adapter change something
    tokens = tokenizer.encode(PROBE)
    expected = logprobs_of(peft_model.eval(), tokens)
    state = get_peft_model_state_dict(peft_model)
    pairs = {
        key.removeprefix("base_model.model.").removesuffix(".lora_A.weight"): (
            a,
            state[key.replace("lora_A", "lora_B")],
        )
        for key, a in state.items()
        if ".lora_A." in key
    }
    adapter = Adapter(pairs=pairs, rank=4, alpha=8, base_model=str(tied_dir), source="tinker://t/weights/x")

    out = tmp_path / "merged"
    out.mkdir()
    notes = merge_adapter(adapter, tied_dir, out)
    assert any("tied" in note for note in notes)
    merged = load_base(out)
    assert merged.lm_head.weight is not merged.get_input_embeddings().weight
    assert torch.equal(
        merged.get_input_embeddings().weight, load_base(tied_dir).get_input_embeddings().weight
    )
    assert (logprobs_of(merged, tokens) - expected).abs().max() < TOLERANCE


# ---- bad input: clear errors, the right exit codes, nothing written ---------------------------------


def test_unknown_checkpoint_names_what_the_run_has(server, trained, tmp_path):
    run = trained.sampler_path.removeprefix("tinker://").split("/")[0]
    result = rtc(
        "export",
        f"tinker://{run}/sampler_weights/nope",
        "-o",
        tmp_path / "o",
        "--state-dir",
        server.state_dir,
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"Error: no checkpoint tinker://{run}/sampler_weights/nope in {server.state_dir}"
    )
    assert trained.sampler_path in result.stderr and trained.state_path in result.stderr
    assert not (tmp_path / "o").exists()


def test_local_run_not_found_in_the_default_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RTC_CACHE_DIR", str(tmp_path / "cache"))
    result = rtc("export", "tinker://rtc-0123abcd_train_0/weights/final", "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert "no checkpoint tinker://rtc-0123abcd_train_0/weights/final in" in result.stderr
    assert "pass --state-dir" in result.stderr


def test_missing_state_dir(tmp_path, trained):
    result = rtc("export", trained.sampler_path, "-o", tmp_path / "o", "--state-dir", tmp_path / "absent")
    assert result.exit_code == 2
    assert result.stderr == f"Error: --state-dir {tmp_path / 'absent'} does not exist\n"
    assert not (tmp_path / "absent").exists() and not (tmp_path / "o").exists()


def test_existing_non_empty_output_is_left_alone(server, trained, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = rtc("export", trained.sampler_path, "-o", out, "--state-dir", server.state_dir)
    assert result.exit_code == 2
    assert result.stderr == f"Error: -o {out} exists and is not empty; choose another -o or remove it\n"
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_an_existing_empty_output_directory_is_used(server, trained, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert rtc("export", trained.sampler_path, "-o", out, "--state-dir", server.state_dir).exit_code == 0
    assert (out / "adapter_model.safetensors").is_file() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "path", ["runs/final", "tinker://run/checkpoints/final", "tinker://run/weights", "tinker://a/weights/b/c"]
)
def test_malformed_checkpoint_path(path, tmp_path):
    result = rtc("export", path, "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {path!r} is not a checkpoint path; expected tinker://<run>/")


def test_failed_merge_leaves_no_half_written_directory(server, tiny_dir, trained, tmp_path):
    """A base with the right class and vocabulary but other shapes fails in the middle of the merge."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(tiny_dir))
    config.hidden_size, config.head_dim = 32, 8
    other = tmp_path / "other-base"
    AutoModelForCausalLM.from_config(config).save_pretrained(str(other))
    work = tmp_path / "work"
    work.mkdir()
    for out in (work / "merged", work / "empty"):
        if out.name == "empty":
            out.mkdir()
        result = rtc(
            "export",
            trained.sampler_path,
            "--merge",
            "--base",
            other,
            "-o",
            out,
            "--state-dir",
            server.state_dir,
        )
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(f"Error: the adapter does not fit {other}: ")
        assert leftovers(work) == []
    assert sorted(p.name for p in work.iterdir()) == ["empty"] and not any((work / "empty").iterdir())


def test_merge_refuses_a_base_of_another_model(server, trained, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    other = tmp_path / "other"
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=100,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    ).save_pretrained(str(other))
    result = rtc(
        "export",
        trained.sampler_path,
        "--merge",
        "--base",
        other,
        "-o",
        tmp_path / "o",
        "--state-dir",
        server.state_dir,
    )
    assert result.exit_code == 1
    assert "trained on LlamaForCausalLM with a vocabulary of 640" in result.stderr
    assert "is LlamaForCausalLM with 100" in result.stderr
    assert not (tmp_path / "o").exists()


def test_base_without_merge_is_a_usage_error(server, trained, tmp_path):
    result = rtc(
        "export",
        trained.sampler_path,
        "--base",
        "tiny",
        "-o",
        tmp_path / "o",
        "--state-dir",
        server.state_dir,
    )
    assert result.exit_code == 2
    assert "--base is for --merge" in result.stderr


def test_hosted_sampler_checkpoints_are_refused_before_any_network_call(tmp_path, monkeypatch):
    monkeypatch.setenv("RTC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TINKER_BASE_URL", "http://192.0.2.1:9")  # TEST-NET: would hang if contacted
    result = rtc("export", "tinker://0d1c-run/sampler_weights/final", "-o", tmp_path / "o")
    assert result.exit_code == 2
    assert "Tinker cannot download sampler checkpoints" in result.stderr
    assert "tinker://0d1c-run/weights/<name>" in result.stderr


def test_hosted_checkpoint_without_an_api_key(tmp_path, monkeypatch):
    """The real SDK path up to its first check: no key, no network call, a plain error."""
    monkeypatch.setenv("RTC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.tinker/credentials.json
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    result = rtc("export", "tinker://0d1c-run/weights/final", "-o", tmp_path / "o")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "Error: tinker://0d1c-run/weights/final is not in rtc serve's state directory"
    )
    assert "Tinker said: TinkerError: The api_key client option must be set" in result.stderr
    assert not (tmp_path / "o").exists()


# ---- vLLM --------------------------------------------------------------------------------------------


def fake_adapter(rank: int, architecture: str | None, vocab: int = 640, lm_head: bool = True) -> Adapter:
    pairs = {"model.layers.0.self_attn.q_proj": (torch.zeros(rank, 8), torch.zeros(8, rank))}
    if lm_head:
        pairs["lm_head"] = (torch.zeros(rank, 8), torch.zeros(vocab, rank))
    return Adapter(
        pairs, rank, 32, "org/base", "tinker://r/weights/x", architecture=architecture, vocab_size=vocab
    )


def test_vllm_report():
    problems, notes = vllm_report(fake_adapter(8, "LlamaForCausalLM"))
    assert problems == [] and notes == [
        "vLLM: vllm serve org/base --enable-lora --lora-modules NAME=<this directory>"
    ]
    problems, notes = vllm_report(fake_adapter(24, "LlamaForCausalLM"))
    assert problems == [] and "--enable-lora --max-lora-rank 32 " in notes[0]
    problems, _ = vllm_report(fake_adapter(8, "Qwen3ForCausalLM"))
    assert len(problems) == 1 and "vLLM has no lm_head LoRA for Qwen3ForCausalLM" in problems[0]
    assert vllm_report(fake_adapter(8, "Qwen3ForCausalLM", lm_head=False))[0] == []
    problems, _ = vllm_report(fake_adapter(8, "LlamaForCausalLM", vocab=262144))
    assert len(problems) == 1 and "up to 258048 tokens" in problems[0]
    problems, notes = vllm_report(fake_adapter(600, "LlamaForCausalLM", lm_head=False))
    assert problems == ["rank 600 is above vLLM's largest --max-lora-rank (512)"] and notes == []


# ---- hosted Tinker, with stand-ins for the SDK's clients ---------------------------------------------


class Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class FakeRest:
    """The four RestClient calls rtc export makes, answered from files on disk."""

    def __init__(self, files: Path, base_model: str | None, urls: dict[str, str] | None = None):
        self.files, self.base_model, self.urls = files, base_model, urls
        self.calls: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    def get_weights_info_by_tinker_path(self, path):
        self.calls.append(("weights_info", path))
        if self.base_model is None:
            raise RuntimeError("weights_info is not available for this checkpoint")
        return Done(SimpleNamespace(base_model=self.base_model, is_lora=True, lora_rank=8))

    def get_external_weights_urls(self, path):
        self.calls.append(("urls", path))
        urls = self.urls if self.urls is not None else {p.name: p.as_uri() for p in self.files.iterdir()}
        return Done(SimpleNamespace(urls=urls))

    def delete_checkpoint_from_tinker_path(self, path):
        self.deleted.append(path)
        return Done(None)


class FakeService:
    def __init__(self):
        self.loaded: list[str] = []
        self.closed: list[str] = []

    def create_training_client_from_state(self, path, user_metadata=None):
        self.loaded.append(path)
        return Done(
            SimpleNamespace(
                save_weights_external=lambda name, ttl_seconds=None: Done(
                    SimpleNamespace(path=f"tinker://export-run/external_weights/{name}")
                )
            )
        )

    def close(self, status, detail=None):
        self.closed.append(status)
        return Done(None)


@pytest.fixture
def tinker_files(server, trained, tmp_path) -> Path:
    """The trained adapter as Tinker stores it: `model.unembed_tokens` for the unembedding."""
    run, kind, name = trained.sampler_path.removeprefix("tinker://").split("/")
    local = server.state_dir / run / kind / name
    tensors = {
        key.replace("base_model.model.lm_head.", "base_model.model.model.unembed_tokens."): value
        for key, value in load_file(str(local / "adapter_model.safetensors")).items()
        if not key.endswith("base_layer.weight")
    }
    files = tmp_path / "tinker-files"
    files.mkdir()
    save_file(tensors, str(files / "adapter_model.safetensors"))
    (files / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 32}))
    (files / "checkpoint_complete").write_text("")
    return files


def test_hosted_external_weights_convert_to_the_same_model(tiny_dir, trained, tinker_files, tmp_path):
    rest = FakeRest(tinker_files, "meta-llama/Llama-3.2-1B")
    out = tmp_path / "adapter"
    result = export_checkpoint("tinker://abc/external_weights/final", out, clients=(rest, FakeService))
    assert result.warnings == []
    assert rest.calls == [
        ("weights_info", "tinker://abc/external_weights/final"),
        ("urls", "tinker://abc/external_weights/final"),
    ]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "meta-llama/Llama-3.2-1B"
    assert "lm_head" in config["target_modules"]
    assert (peft_logprobs(tiny_dir, out, trained.probe) - trained.logprobs).abs().max() < TOLERANCE


def test_hosted_external_weights_take_the_base_model_from_their_config(tinker_files, tmp_path):
    config = json.loads((tinker_files / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "meta-llama/Llama-3.2-3B"
    (tinker_files / "adapter_config.json").write_text(json.dumps(config))
    out = tmp_path / "adapter"
    export_checkpoint(
        "tinker://abc/external_weights/final", out, clients=(FakeRest(tinker_files, None), FakeService)
    )
    assert (
        json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
        == "meta-llama/Llama-3.2-3B"
    )


def test_hosted_state_checkpoint_goes_through_a_temporary_export_that_is_deleted(tinker_files, tmp_path):
    rest, service = FakeRest(tinker_files, "meta-llama/Llama-3.2-1B"), FakeService()
    export_checkpoint("tinker://abc/weights/step-5", tmp_path / "a", clients=(rest, lambda: service))
    assert service.loaded == ["tinker://abc/weights/step-5"]
    assert rest.deleted == ["tinker://export-run/external_weights/rtc-export"] and service.closed == [
        "success"
    ]

    rest = FakeRest(tinker_files, "meta-llama/Llama-3.2-1B", urls={"adapter_config.json.age": "file:///x"})
    service = FakeService()
    with pytest.raises(RtcError, match="encrypted with age"):
        export_checkpoint("tinker://abc/weights/step-5", tmp_path / "b", clients=(rest, lambda: service))
    assert rest.deleted == ["tinker://export-run/external_weights/rtc-export"] and service.closed == [
        "errored"
    ]
    assert not (tmp_path / "b").exists()


def test_hosted_qwen_adapter_with_an_unembedding_lora_warns_or_is_refused(tinker_files, tmp_path):
    rest = FakeRest(tinker_files, "Qwen/Qwen3-8B")
    with pytest.raises(RtcError, match=r"vLLM would not load this adapter \(--vllm\), nothing written"):
        export_checkpoint(
            "tinker://q/external_weights/f",
            tmp_path / "strict",
            strict_vllm=True,
            clients=(rest, FakeService),
        )
    assert not (tmp_path / "strict").exists()
    result = export_checkpoint("tinker://q/external_weights/f", tmp_path / "o", clients=(rest, FakeService))
    assert len(result.warnings) == 1 and "lm_head" in result.warnings[0]
    assert "## Warnings" in (tmp_path / "o" / "README.md").read_text()


def test_hosted_mixture_of_experts_adapter_is_refused(tmp_path):
    files = tmp_path / "moe"
    files.mkdir()
    save_file(
        {
            "base_model.model.model.layers.0.mlp.experts.w1.lora_A.weight": torch.zeros(4, 2, 8),
            "base_model.model.model.layers.0.mlp.experts.w1.lora_B.weight": torch.zeros(4, 8, 2),
        },
        str(files / "adapter_model.safetensors"),
    )
    (files / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 32}))
    with pytest.raises(
        RtcError, match="converts dense models only; tinker-cookbook's weights.build_lora_adapter"
    ):
        export_checkpoint(
            "tinker://m/external_weights/f",
            tmp_path / "o",
            clients=(FakeRest(files, "Qwen/Qwen3-30B-A3B"), FakeService),
        )
    assert not (tmp_path / "o").exists()


def test_hosted_sampler_path_makes_no_sdk_call(tmp_path, monkeypatch):
    monkeypatch.setenv("RTC_CACHE_DIR", str(tmp_path / "cache"))
    rest = FakeRest(tmp_path, "meta-llama/Llama-3.2-1B")
    with pytest.raises(UsageError, match="Tinker cannot download sampler checkpoints"):
        export_checkpoint("tinker://abc/sampler_weights/final", tmp_path / "o", clients=(rest, FakeService))
    assert rest.calls == []
