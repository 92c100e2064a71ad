"""The JSON request bodies, validated once at the edge.

Each endpoint's body is a pydantic model checked before the route runs: types are strict (no
``"5"`` for 5, no ``true`` for 1), numbers are finite (``NaN`` and ``Infinity``, which Python's
JSON parser accepts, are refused) and bounded (a seed beyond 63 bits, a learning rate of
1e300 are 400s, not engine errors). Unknown fields are ignored, as the hosted service does, so
a newer SDK that sends one more field still works. What needs the model to judge (token ids
inside the vocabulary, prompts inside the context) the service checks.

Field names and shapes are those of ``tinker.types`` in SDK 0.38 (``CreateModelRequest``,
``SampleRequest``, ...); the SDK's own classes are not used because they forbid unknown fields
and carry no bounds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from .limits import (
    MAX_ID_CHARS,
    MAX_LEARNING_RATE,
    MAX_PATH_CHARS,
    MAX_RANK,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_SEQ_ID,
    MAX_STOP_CHARS,
    MAX_STOPS,
    MAX_TEMPERATURE,
    MAX_TOPK,
    MIN_TEMPERATURE,
)

Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]
Path = Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)]  # checked by state.py
SeqId = Annotated[int, Field(ge=0, le=MAX_SEQ_ID)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
NonNegative = Annotated[float, Field(ge=0)]


class Body(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)


class SessionRef(Body):
    session_id: Id


class ModelRef(Body):
    model_id: Id


class FutureRef(Body):
    request_id: Id


class LoraConfig(Body):
    rank: Annotated[int, Field(ge=1, le=MAX_RANK)]
    seed: Seed | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    @model_validator(mode="after")
    def _something_to_train(self) -> LoraConfig:
        if not (self.train_mlp or self.train_attn or self.train_unembed):
            raise ValueError("train_mlp, train_attn and train_unembed are all false")
        return self


class OptimizerConfig(Body):
    type: Literal["adam", "adamw"] = "adamw"


class CreateModel(Body):
    session_id: Id
    model_seq_id: SeqId
    base_model: Id
    lora_config: LoraConfig
    optimizer_config: OptimizerConfig | None = None


class AdamParams(Body):
    type: Literal["adam", "adamw"] | None = None
    learning_rate: Annotated[float, Field(ge=0, le=MAX_LEARNING_RATE)] = 1e-4
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    eps: Annotated[float, Field(ge=0, le=1e3)] = 1e-12
    weight_decay: NonNegative = 0.0
    grad_clip_norm: NonNegative = 0.0

    @model_validator(mode="after")
    def _decay(self) -> AdamParams:
        # Decoupled weight decay multiplies the weights by 1 - lr * wd each step.
        if self.learning_rate * self.weight_decay > 1:
            raise ValueError("learning_rate * weight_decay must be at most 1")
        return self


class OptimStep(Body):
    model_id: Id
    seq_id: SeqId
    # The SDK 0.38 sends optim_params; older clients sent adam_params.
    optim_params: AdamParams | None = None
    adam_params: AdamParams | None = None

    @model_validator(mode="after")
    def _has_params(self) -> OptimStep:
        if self.optim_params is None and self.adam_params is None:
            raise ValueError("missing field 'optim_params' (Adam's hyperparameters)")
        return self

    @property
    def params(self) -> AdamParams:
        return self.optim_params or self.adam_params  # type: ignore[return-value]


class SaveWeights(Body):
    model_id: Id
    seq_id: SeqId
    path: Path


class SaveWeightsForSampler(Body):
    model_id: Id
    seq_id: SeqId
    path: Path | None = None
    sampling_session_seq_id: SeqId | None = None


class LoadWeights(Body):
    path: Path
    optimizer: bool = False
    # A new training client (create_training_client_from_state*) ...
    session_id: Id | None = None
    model_seq_id: SeqId | None = None
    base_model: Id | None = None
    # ... or the deprecated TrainingClient.load_state on an existing one.
    model_id: Id | None = None
    seq_id: SeqId | None = None

    @model_validator(mode="after")
    def _one_target(self) -> LoadWeights:
        if self.model_id is not None:
            if self.seq_id is None:
                raise ValueError("load_weights into model_id needs seq_id")
        elif self.session_id is None or self.model_seq_id is None:
            raise ValueError("load_weights needs session_id and model_seq_id (or model_id and seq_id)")
        return self


class CreateSamplingSession(Body):
    session_id: Id
    sampling_session_seq_id: SeqId
    base_model: Id | None = None
    model_path: Path | None = None

    @model_validator(mode="after")
    def _has_a_model(self) -> CreateSamplingSession:
        if self.base_model is None and self.model_path is None:
            raise ValueError("create_sampling_session needs base_model or model_path")
        return self


class TextChunk(Body):
    type: str = "encoded_text"
    tokens: list[TokenId] = []

    @model_validator(mode="after")
    def _text_only(self) -> TextChunk:
        if self.type != "encoded_text":
            raise ValueError(f"only text input is supported by this server, got a {self.type!r} chunk")
        return self


class ModelInput(Body):
    chunks: list[TextChunk]

    @property
    def tokens(self) -> list[int]:
        return [token for chunk in self.chunks for token in chunk.tokens]


StopText = Annotated[str, StringConstraints(max_length=MAX_STOP_CHARS)]


class SamplingParams(Body):
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    seed: Seed | None = None
    stop: (
        StopText
        | Annotated[list[StopText], Field(max_length=MAX_STOPS)]
        | Annotated[list[TokenId], Field(max_length=MAX_STOPS)]
        | None
    ) = None
    temperature: Annotated[float, Field(ge=0, le=MAX_TEMPERATURE)] = 1.0
    top_k: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0

    @model_validator(mode="after")
    def _temperature(self) -> SamplingParams:
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return self


class Sample(Body):
    # The SDK always samples through a sampling session, which is what ties the request (and
    # its future) to the session that owns it; a bare base_model or model_path is refused.
    sampling_session_id: Id
    seq_id: SeqId | None = None
    num_samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] = 1
    prompt: ModelInput
    sampling_params: SamplingParams = SamplingParams()
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: Annotated[int, Field(ge=0, le=MAX_TOPK)] = 0
    prompt_logprobs_last_n: Annotated[int, Field(ge=1)] | None = None
    # Fields of the SDK this server does not serve: anything but "off" is refused.
    topk_sample_logprobs: Annotated[int, Field(ge=0)] = 0
    prompt_alt_tokens_k: Annotated[int, Field(ge=0)] = 0
    target_prompt_logprobs: object = None

    @model_validator(mode="after")
    def _servable(self) -> Sample:
        for name in ("topk_sample_logprobs", "prompt_alt_tokens_k", "target_prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value != 0:
                raise ValueError(f"{name} is not supported by this server")
        if self.prompt_logprobs_last_n is not None and not self.prompt_logprobs:
            raise ValueError("prompt_logprobs_last_n needs prompt_logprobs")
        return self
