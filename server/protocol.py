"""Wire formats: protobuf and JSON messages of the Tinker API to and from engine types.

The SDK sends ``forward_backward`` as a protobuf ``ForwardBackwardRequest`` and accepts
``ForwardBackwardOutput`` and ``SampleResponse`` results only as protobuf; everything else is
JSON. The message classes come from the SDK itself (``tinker.proto.tinker_public_pb2``), so
the server can never drift from the field numbers the client uses.

Decoding errors raise :class:`ProtocolError`, which the HTTP layer answers with 400.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tinker.proto import tinker_public_pb2 as pb

from .engine import AdamParams, Datum, ForwardResult
from .sampling import SamplingRequest, SamplingResult

_DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
_JSON_DTYPES = {"float32": np.float32, "int64": np.int64}


MAX_SAMPLES = 128


class ProtocolError(ValueError):
    """A request body that does not decode into what the endpoint needs."""


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float]
    data: list[Datum]
    forward_only: bool


def _tensor(message: pb.Tensor, where: str) -> torch.Tensor:
    dtype = _DTYPES.get(message.dtype)
    if dtype is None:
        raise ProtocolError(f"{where}: unsupported tensor dtype {message.dtype}")
    shape = [int(s) for s in message.shape]
    encoding = message.WhichOneof("encoding")
    try:
        if encoding == "sparse_csr":
            if len(shape) != 2:
                raise ProtocolError(f"{where}: a sparse tensor needs a 2-D shape, got {shape}")
            values = np.frombuffer(message.sparse_csr.values, dtype=dtype)
            crow = np.frombuffer(message.sparse_csr.crow_indices, dtype=np.int64)
            col = np.frombuffer(message.sparse_csr.col_indices, dtype=np.int64)
            dense = torch.sparse_csr_tensor(
                torch.from_numpy(crow.copy()),
                torch.from_numpy(col.copy()),
                torch.from_numpy(values.copy()),
                size=tuple(shape),
            ).to_dense()
            return dense.float() if dtype == np.float32 else dense.long()
        array = np.frombuffer(message.dense, dtype=dtype).copy()
        if shape:
            array = array.reshape(shape)
    except (ValueError, RuntimeError) as error:
        raise ProtocolError(f"{where}: {error}") from None
    tensor = torch.from_numpy(array)
    return tensor.float() if dtype == np.float32 else tensor.long()


def _chunks_to_tokens(chunks, where: str) -> list[int]:
    tokens: list[int] = []
    for chunk in chunks:
        kind = chunk.WhichOneof("chunk")
        if kind not in (None, "encoded_text"):
            raise ProtocolError(f"{where}: only text input is supported by this server, got a {kind} chunk")
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except Exception as error:  # protobuf raises its own DecodeError
        raise ProtocolError(
            f"forward_backward body is not a ForwardBackwardRequest protobuf: {error}"
        ) from None
    config: dict[str, float] = {key: float(value) for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        if value.WhichOneof("value") == "text":
            raise ProtocolError(f"loss_fn_config[{key!r}] is text; the built-in losses take numbers")
        config[key] = float(value.number)
    data = []
    for index, datum in enumerate(message.data):
        where = f"datum {index}"
        tokens = _chunks_to_tokens(datum.model_input, where)
        inputs = {name: _tensor(tensor, f"{where} {name}") for name, tensor in datum.loss_fn_inputs.items()}
        data.append(Datum(tokens=tokens, inputs=inputs))
    return ForwardBackwardCall(
        model_id=message.model_id,
        seq_id=int(message.seq_id),
        loss_fn=message.loss_fn,
        loss_fn_config=config,
        data=data,
        forward_only=bool(message.forward_only),
    )


def encode_forward_backward(result: ForwardResult, metrics: dict[str, float]) -> bytes:
    """One ``ArrayRecord`` per run of datums with the same trailing shape ([N] or [N, K])."""
    out = pb.ForwardBackwardOutput()
    out.loss_fn_output_type = "ArrayRecord"
    for key, value in metrics.items():
        out.metrics[key] = float(value)
    groups: list[list[int]] = []
    for index, logprobs in enumerate(result.logprobs):
        trailing = list(logprobs.shape[1:])
        if groups and list(result.logprobs[groups[-1][0]].shape[1:]) == trailing:
            groups[-1].append(index)
        else:
            groups.append([index])
    for group in groups:
        record = out.loss_fn_outputs.add()
        record.type_tag = "ArrayRecord"
        record.num_datums = len(group)
        for field_name, values in (
            ("logprobs", result.logprobs),
            ("elementwise_loss", result.elementwise_loss),
        ):
            arrays = [values[i].numpy().astype(np.float32).ravel() for i in group]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
            batched = record.fields[field_name]
            batched.data = b"".join(a.tobytes() for a in arrays)
            batched.offsets = offsets.tobytes()
            batched.dtype = pb.DTYPE_FLOAT32
            batched.trailing_shape.extend(list(values[group[0]].shape[1:]))
    return out.SerializeToString()


def encode_sample(result: SamplingResult) -> bytes:
    out = pb.SampleResponse()
    for sequence in result.sequences:
        message = out.sequences.add()
        message.stop_reason = pb.STOP_REASON_STOP if sequence.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        message.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        message.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if result.prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(result.prompt_logprobs, dtype=np.float32).tobytes()
    if result.topk_prompt is not None:
        ids, values = result.topk_prompt
        out.topk_prompt_logprobs.token_ids = ids.numpy().astype(np.int32).tobytes()
        out.topk_prompt_logprobs.logprobs = values.numpy().astype(np.float32).tobytes()
        out.topk_prompt_logprobs.length = int(ids.shape[0])
        out.topk_prompt_logprobs.k = int(ids.shape[1])
    return out.SerializeToString()


# ----- JSON helpers ---------------------------------------------------------------------------


def require(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in body or body[key] is None:
        raise ProtocolError(f"{where}: missing field {key!r}")
    return expect(body[key], kind, f"{where}.{key}")


def optional(
    body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None
) -> Any:
    if body.get(key) is None:
        return default
    return expect(body[key], kind, f"{where}.{key}")


def expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolError(f"{where}: expected {'/'.join(k.__name__ for k in kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise ProtocolError(
            f"{where}: expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ProtocolError(f"{where}: must be a finite number")
    return value


def json_model_input(value: Any, where: str) -> list[int]:
    """Tokens of a JSON ``ModelInput`` (``{"chunks": [{"type": "encoded_text", "tokens": [...]}]}``)."""
    chunks = require(expect(value, dict, where), "chunks", list, where)
    tokens: list[int] = []
    for index, chunk in enumerate(chunks):
        chunk = expect(chunk, dict, f"{where}.chunks[{index}]")
        kind = chunk.get("type", "encoded_text")
        if kind != "encoded_text":
            raise ProtocolError(f"{where}.chunks[{index}]: only text input is supported, got {kind!r}")
        for token in require(chunk, "tokens", list, f"{where}.chunks[{index}]"):
            tokens.append(expect(token, int, f"{where}.chunks[{index}].tokens[]"))
    return tokens


def adam_params(body: dict[str, Any]) -> AdamParams:
    key = next(
        (k for k in ("adam_params", "optimizer_params", "optim_params") if body.get(k) is not None), None
    )
    if key is None:
        raise ProtocolError("optim_step: missing field 'adam_params'")
    params = expect(body[key], dict, f"optim_step.{key}")
    if params.get("type") not in (None, "adam", "adamw"):
        raise ProtocolError(f"optimizer {params.get('type')!r} is not supported; this server runs AdamW")
    known = {"learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm", "type"}
    unknown = set(params) - known
    if unknown:
        raise ProtocolError(f"optim_step.adam_params: unknown fields {sorted(unknown)}")
    defaults = AdamParams()
    values = {
        key: optional(params, key, float, "optim_step.adam_params", getattr(defaults, key))
        for key in known - {"type"}
    }
    result = AdamParams(**values)
    if result.learning_rate < 0 or result.eps < 0 or result.weight_decay < 0 or result.grad_clip_norm < 0:
        raise ProtocolError(
            "optim_step.adam_params: learning_rate, eps, weight_decay, grad_clip_norm must be >= 0"
        )
    if not (0 <= result.beta1 < 1 and 0 <= result.beta2 < 1):
        raise ProtocolError("optim_step.adam_params: beta1 and beta2 must be in [0, 1)")
    return result


def sampling_request(body: dict[str, Any], prompt: list[int], eos_ids: set[int]) -> SamplingRequest:
    """The ``asample`` JSON body as a :class:`SamplingRequest`.

    ``stop``: ``None`` stops at end-of-sequence (``eos_ids``); strings stop there too; token ids
    replace the end-of-sequence ids; ``[]`` disables every stop, as the SDK documents.
    """
    where = "asample.sampling_params"
    params = optional(body, "sampling_params", dict, "asample", {})
    num_samples = optional(body, "num_samples", int, "asample", 1)
    if not 1 <= num_samples <= MAX_SAMPLES:
        raise ProtocolError(f"asample.num_samples must be between 1 and {MAX_SAMPLES}")
    max_tokens = optional(params, "max_tokens", int, where)
    if max_tokens is not None and max_tokens < 0:
        raise ProtocolError(f"{where}.max_tokens must be >= 0")
    temperature = optional(params, "temperature", float, where, 1.0)
    top_p = optional(params, "top_p", float, where, 1.0)
    if temperature < 0 or not 0 < top_p <= 1:
        raise ProtocolError(f"{where}: temperature must be >= 0 and top_p in (0, 1]")
    stop = params.get("stop")
    stop_strings: list[str] = []
    stop_ids: list[int] = sorted(eos_ids)
    if isinstance(stop, str):
        stop_strings = [stop]
    elif isinstance(stop, list):
        if all(isinstance(s, str) for s in stop):
            stop_strings = stop
        elif all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
            stop_ids = stop
        else:
            raise ProtocolError(f"{where}.stop must be a string, a list of strings or a list of token ids")
        if not stop:
            stop_ids = []
    elif stop is not None:
        raise ProtocolError(f"{where}.stop must be a string, a list of strings or a list of token ids")
    topk_prompt = optional(body, "topk_prompt_logprobs", int, "asample", 0)
    if topk_prompt < 0:
        raise ProtocolError("asample.topk_prompt_logprobs must be >= 0")
    for name in ("topk_sample_logprobs", "prompt_alt_tokens_k"):
        if optional(body, name, int, "asample", 0):
            raise ProtocolError(f"asample.{name} is not supported by this server")
    if body.get("target_prompt_logprobs") is not None:
        raise ProtocolError("asample.target_prompt_logprobs is not supported by this server")
    want_prompt_logprobs = bool(optional(body, "prompt_logprobs", bool, "asample", False))
    last_n = optional(body, "prompt_logprobs_last_n", int, "asample")
    if last_n is not None and not (want_prompt_logprobs and 1 <= last_n <= len(prompt) - 1):
        raise ProtocolError(
            f"asample.prompt_logprobs_last_n must be between 1 and {len(prompt) - 1} (the prompt length - 1) "
            "and needs prompt_logprobs"
        )
    return SamplingRequest(
        prompt=prompt,
        num_samples=num_samples,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=optional(params, "top_k", int, where, -1),
        top_p=top_p,
        seed=optional(params, "seed", int, where),
        stop_strings=stop_strings,
        stop_token_ids=stop_ids,
        prompt_logprobs=want_prompt_logprobs,
        topk_prompt_logprobs=topk_prompt,
        prompt_logprobs_last_n=last_n,
    )
