"""``rtc serve --model tiny-<family>``: each family's real vocabulary and format through the SDK.

One server per family model (a module-scoped, parametrized fixture), started as users start it;
the models are built once into the rtc cache and reused. Data is rendered with the family's own
renderer (tml-renderers, or the Llama 3.1 chat template through ``get_tokenizer()``), trained until
the tiny model reproduces the answer, and sampled greedily: the sample must be exactly the
trained completion, end on one of the renderer's stop tokens with ``stop_reason == "stop"``, and
parse back into the answer with the family's parser.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tinker
from tinker import types
from tiny_kit import RunningServer, next_token_datum, start_server, stop_server, wait_until
from tml_renderers import chat, renderers
from tml_renderers.tinker import (
    token_spans_to_tinker_model_input,
    training_example_to_tinker_model_input_and_weights,
)

from rtc.server.family_models import FAMILY_MODELS
from rtc.server.family_tokenizers import TmlTokenizer
from rtc.server.models import prepare, prepare_model

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CONVERSATION = [*QUESTION, {"role": "assistant", "content": "4"}]
# Per-token loss at which the tiny model reproduces the answer greedily.
LEARNED_LOSS = 0.05
MAX_STEPS = 60


@dataclass(frozen=True)
class Family:
    model: str  # rtc serve --model
    renderer: str  # tml_renderers.renderers class
    name: str  # a base model of the family
    other_name: str  # another one
    stop: tuple[int, ...]  # the real stop ids of the family


TML_FAMILIES = [
    Family("tiny-qwen3", "Qwen3", "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B-Base", (151645,)),
    Family("tiny-qwen35", "Qwen35", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.8-27B", (248046,)),
    Family(
        "tiny-nemotron3",
        "Nemotron3",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
        (11,),
    ),
    Family("tiny-gpt-oss", "GptOss", "openai/gpt-oss-20b", "openai/gpt-oss-120b", (199999, 200002, 200012)),
    Family(
        "tiny-deepseek", "DeepSeekV31", "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3.1-Base", (1,)
    ),
]
# A catalog model each family must refuse, and the family model that would serve it.
FOREIGN = {
    "tiny-qwen3": ("openai/gpt-oss-20b", "tiny-gpt-oss"),
    "tiny-qwen35": ("Qwen/Qwen3-8B", "tiny-qwen3"),
    "tiny-nemotron3": ("deepseek-ai/DeepSeek-V3.1", "tiny-deepseek"),
    "tiny-gpt-oss": ("meta-llama/Llama-3.1-8B-Instruct", "tiny-llama3"),
    "tiny-deepseek": ("Qwen/Qwen3.5-4B", "tiny-qwen35"),
    "tiny-llama3": ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "tiny-nemotron3"),
}


@dataclass
class Served:
    family: Family
    server: RunningServer
    client: tinker.ServiceClient


@contextlib.contextmanager
def serve(family: Family, tmp_path_factory) -> Iterator[Served]:
    """``rtc serve --model family.model`` and an SDK client of it, both closed at the end."""
    running = start_server(tmp_path_factory.mktemp(f"state-{family.model}"), model=family.model)
    client = tinker.ServiceClient(base_url=running.url, api_key=running.api_key)
    try:
        yield Served(family, running, client)
    finally:
        client.close("success").result()  # stops its heartbeats before the server goes
        code = stop_server(running)
    assert code == 0, "".join(running.output[-40:])
    assert "Traceback" not in "".join(running.output)


@pytest.fixture(scope="module", params=TML_FAMILIES, ids=lambda family: family.model)
def served(request, tmp_path_factory):
    with serve(request.param, tmp_path_factory) as running:
        yield running


def train_until_learned(training, datum: types.Datum, weight_sum: float) -> list[float]:
    """Train on one datum until its per-token loss is below LEARNED_LOSS; the losses seen."""
    losses = []
    for _ in range(MAX_STEPS):
        backward = training.forward_backward([datum], "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=1e-2))
        losses.append(backward.result().metrics["loss:sum"] / weight_sum)
        step.result()
        if losses[-1] < LEARNED_LOSS:
            break
    return losses


def greedy(sampler, prompt: list[int], max_tokens: int, stop) -> types.SampledSequence:
    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=stop)
    return sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]


# ----- the models, without a server ---------------------------------------------------------------


@pytest.mark.parametrize("family", TML_FAMILIES, ids=lambda family: family.model)
def test_vocabulary_is_exactly_the_ids_the_family_tokenizer_produces(family):
    model_dir = prepare_model(family.model)
    config = json.loads((model_dir / "config.json").read_text())
    recorded = json.loads((model_dir / "rtc_family.json").read_text())
    native = TmlTokenizer(recorded["tokenizer"], recorded["stop_token_ids"]).native
    vocab = config["vocab_size"]
    assert recorded["vocab_size"] == vocab
    special_ids = [native.encode_special(name) for name in native.special_tokens()]
    ordinary = native.encode_ordinary("Straße 東京 😀 12345 def f(x): return x**2 \u0000\t\n" * 3)
    assert max(special_ids + ordinary) < vocab
    # Every id of the model decodes (a random model samples any of them), and none beyond does.
    for token_id in range(vocab):
        native.decode_bytes([token_id])
    with pytest.raises(ValueError):
        native.decode_bytes([vocab])
    # The default stops are the renderer's, which are the family's real stop ids.
    assert set(getattr(renderers, family.renderer)().stop()) == set(family.stop)
    assert sorted(recorded["stop_token_ids"]) == sorted(family.stop)
    assert sorted(json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]) == sorted(
        family.stop
    )
    assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2


def test_family_models_are_listed_in_serve_help():
    from rtc.server.cli import build_parser

    text = build_parser().format_help()
    for name in FAMILY_MODELS:
        assert f"\n  {name} " in text
    assert {family.model for family in TML_FAMILIES} | {"tiny-llama3"} == set(FAMILY_MODELS)


def test_unknown_model_names_every_choice():
    from rtc.server.models import ModelPreparationError

    with pytest.raises(ModelPreparationError) as error:
        prepare("tiny-mistral")
    assert "'tiny-qwen3'" in str(error.value) and "'tiny-llama3'" in str(error.value)


# ----- tml families through the SDK ------------------------------------------------------------------


def test_get_info_reports_the_requested_name_of_the_family(served):
    family = served.family
    for name in (family.name, family.other_name):
        training = served.client.create_lora_training_client(base_model=name, rank=4).result()
        info = training.get_info()
        assert info.model_data.model_name == name
        # No Hugging Face tokenizer exists offline for tml families: the name, as hosted Tinker says.
        assert info.model_data.tokenizer_id == name
        assert info.model_data.arch == "LlamaForCausalLM"
    with httpx.Client(base_url=served.server.url, headers={"X-API-Key": served.server.api_key}) as http:
        listed = [
            m["model_name"] for m in http.get("/api/v1/get_server_capabilities").json()["supported_models"]
        ]
    assert listed == FAMILY_MODELS[family.model].served_names()
    assert family.name in listed and family.other_name in listed


def test_refuses_other_families_and_unknown_names(served):
    foreign, right_model = FOREIGN[served.family.model]
    with pytest.raises(tinker.BadRequestError) as error:
        served.client.create_lora_training_client(base_model=foreign, rank=4).result()
    message = str(error.value)
    assert f"rtc serve --model {served.family.model} serves only" in message
    assert f"{foreign!r} has the" in message and f"start rtc serve --model {right_model}" in message
    with pytest.raises(tinker.BadRequestError) as error:
        served.client.create_sampling_client(base_model=foreign).result()
    assert f"start rtc serve --model {right_model}" in str(error.value)
    with pytest.raises(tinker.BadRequestError) as error:
        served.client.create_lora_training_client(base_model="acme/Unknown-7B", rank=4).result()
    assert "'acme/Unknown-7B' is not in rtc's model catalog" in str(error.value)


def test_trains_and_stops_in_the_family_format(served):
    family = served.family
    renderer = getattr(renderers, family.renderer)()
    messages = [chat.OpenAIMessage.from_oss_dict(m) for m in CONVERSATION]
    model_input, weights = training_example_to_tinker_model_input_and_weights(
        renderer.render_for_sft(messages)[0]
    )
    tokens = model_input.to_ints()
    spans, parser = renderer.render_for_completion(messages[:1])
    prompt = token_spans_to_tinker_model_input(spans).to_ints()
    completion = tokens[len(prompt) :]
    assert tokens[: len(prompt)] == prompt and completion[-1] in family.stop
    assert [t for t, w in zip(tokens, weights, strict=True) if w > 0] == completion

    training = served.client.create_lora_training_client(base_model=family.name, rank=8, seed=0).result()
    losses = train_until_learned(training, next_token_datum(tokens, weights[1:]), sum(weights[1:]))
    assert losses[-1] < LEARNED_LOSS < losses[0] / 100, losses

    sampler = training.save_weights_and_get_sampling_client().result()
    stop_text = renderer.tokenizer.decode([completion[-1]])
    # The renderer's stop ids, the server's default (no stop given) and the stop token as a string.
    for stop in (renderer.stop(), None, [stop_text]):
        sequence = greedy(sampler, prompt, len(completion) + 8, stop)
        assert sequence.stop_reason == "stop", (stop, sequence.tokens)
        assert sequence.tokens == completion, (stop, renderer.tokenizer.decode(sequence.tokens))
    # Without a stop the model runs on past the stop token: the stops above did the stopping.
    sequence = greedy(sampler, prompt, len(completion) + 8, [])
    assert sequence.stop_reason == "length" and sequence.tokens[: len(completion)] == completion
    answer = [m for m in parser.parse_tokens(completion) if isinstance(m.content, chat.Text)]
    assert [m.content.text for m in answer] == ["4"]

    # A saved sampler reports the family's name (SamplingClient.get_base_model), and a checkpoint
    # holds the LoRA weights only (not the frozen unembedding: 200k x 64 floats for gpt-oss).
    path = training.save_weights_for_sampler("learned").result().path
    restored = served.client.create_sampling_client(model_path=path).result()
    assert restored.get_base_model() == family.name
    assert greedy(restored, prompt, len(completion) + 8, renderer.stop()).tokens == completion
    (adapter,) = Path(served.server.state_dir).rglob("adapter_model.safetensors")
    from safetensors import safe_open

    with safe_open(str(adapter), "pt") as saved:
        assert all("lora_" in key for key in saved.keys())


# ----- tiny-llama3: the Hugging Face chat template path -----------------------------------------------


LLAMA31_CONVERSATION = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    "Answer briefly.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
)
LLAMA31_PROMPT_WITHOUT_SYSTEM = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    family = Family("tiny-llama3", "", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B", ())
    with serve(family, tmp_path_factory) as running:
        yield running


def test_llama3_tokenizer_has_llama3_special_tokens_and_the_llama31_template():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_model("tiny-llama3")))
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|start_header_id|>"]
    names += [
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
        "<|reserved_special_token_247|>",
    ]
    ids = tokenizer.convert_tokens_to_ids(names)
    assert len(set(ids)) == len(names) and max(ids) == len(tokenizer) - 1
    special = set(tokenizer.convert_tokens_to_ids(tokenizer.all_special_tokens)) | set(
        tokenizer.added_tokens_decoder
    )
    assert len(tokenizer.added_tokens_decoder) == 256 and set(ids) <= special
    assert tokenizer.bos_token == "<|begin_of_text|>" and tokenizer.eos_token == "<|eot_id|>"
    # Like Llama 3's tokenizer: encode() prepends <|begin_of_text|>; special tokens are one id each.
    encoded = tokenizer.encode("hi<|eot_id|>")
    assert encoded[0] == tokenizer.bos_token_id and encoded[-1] == tokenizer.convert_tokens_to_ids(
        "<|eot_id|>"
    )
    system = [{"role": "system", "content": "Answer briefly."}]
    assert tokenizer.apply_chat_template(system + CONVERSATION, tokenize=False) == LLAMA31_CONVERSATION
    assert (
        tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
        == LLAMA31_PROMPT_WITHOUT_SYSTEM
    )
    tool_turns = [
        *QUESTION,
        {"role": "assistant", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4"},
    ]
    rendered = tokenizer.apply_chat_template(tool_turns, tokenize=False)
    assert rendered.endswith(
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "add", "parameters": {"a": 2, "b": 2}}'
        '<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"4"<|eot_id|>'
    )


def test_llama3_serves_llama_names_with_an_offline_tokenizer(llama3):
    for name in (llama3.family.name, llama3.family.other_name):
        training = llama3.client.create_lora_training_client(base_model=name, rank=4).result()
        info = training.get_info()
        assert info.model_data.model_name == name
        assert Path(info.model_data.tokenizer_id, "tokenizer.json").is_file()
        assert training.get_tokenizer().bos_token == "<|begin_of_text|>"
    foreign, right_model = FOREIGN["tiny-llama3"]
    with pytest.raises(tinker.BadRequestError) as error:
        llama3.client.create_lora_training_client(base_model=foreign, rank=4).result()
    assert f"start rtc serve --model {right_model}" in str(error.value)


def test_llama3_trains_on_the_chat_template_and_stops_on_eot(llama3):
    training = llama3.client.create_lora_training_client(
        base_model=llama3.family.name, rank=8, seed=0
    ).result()
    tokenizer = training.get_tokenizer()

    def encode(messages, generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        return tokenizer.encode(text, add_special_tokens=False)

    tokens = encode(CONVERSATION, False)
    prompt = encode(QUESTION, True)
    assert tokens[: len(prompt)] == prompt
    completion = tokens[len(prompt) :]
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert completion[-1] == eot and tokens.count(tokenizer.bos_token_id) == 1
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(completion)
    losses = train_until_learned(training, next_token_datum(tokens, weights), len(completion))
    assert losses[-1] < LEARNED_LOSS < losses[0] / 100, losses

    sampler = training.save_weights_and_get_sampling_client().result()
    for stop in ([eot], None, ["<|eot_id|>"]):
        sequence = greedy(sampler, prompt, len(completion) + 8, stop)
        assert sequence.stop_reason == "stop" and sequence.tokens == completion, (stop, sequence.tokens)
    assert greedy(sampler, prompt, len(completion) + 8, []).stop_reason == "length"
    assert tokenizer.decode(completion, skip_special_tokens=True) == "4"
    path = training.save_weights_for_sampler("learned").result().path
    restored = llama3.client.create_sampling_client(model_path=path).result()
    assert restored.get_base_model() == llama3.family.name
    assert greedy(restored, prompt, len(completion) + 8, [eot]).tokens == completion


# ----- models that serve any name ---------------------------------------------------------------------


def test_tiny_serves_any_name_and_reports_its_own(server, service):
    for name in ("Qwen/Qwen3-8B", "acme/Unknown-7B", "acme/Unknown-7B"):
        info = service.create_lora_training_client(base_model=name, rank=4).result().get_info()
        # Never the requested name: tiny's tokenizer is not Qwen3's, so a loop must use tiny's template.
        assert info.model_data.model_name == "rtc/tiny"
        assert Path(info.model_data.tokenizer_id, "tokenizer.json").is_file()
    said = "base_model 'acme/Unknown-7B' is served by the local model"
    assert wait_until(lambda: said in "".join(server.output))
    assert "".join(server.output).count(said) == 1
