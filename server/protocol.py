"""Wire formats: protobuf and JSON messages of the Tinker API to and from engine types.

The SDK sends ``forward_backward`` as a protobuf ``ForwardBackwardRequest`` and accepts
``ForwardBackwardOutput`` and ``SampleResponse`` results only as protobuf; everything else is
JSON. The message classes come from the SDK itself (``tinker.proto.tinker_public_pb2``), so
the server can never drift from the field numbers the client uses.

Decoding errors raise :class:`ProtocolError` (400). JSON bodies arrive already validated
(:mod:`rtc.server.requests`); the functions at the end turn them into engine types.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tinker.proto import tinker_public_pb2 as pb

from . import requests
from .engine import AdamParams, Datum, ForwardResult, LoraSettings
from .errors import BadRequest
from .limits import MAX_TOPK
from .sampling import SamplingRequest, SamplingResult

_DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


class ProtocolError(BadRequest):
    """A request body that does not decode into what the endpoint needs (400)."""


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float]
    data: list[Datum]
    forward_only: bool


def _tensor(message: pb.Tensor, where: str, length: int) -> torch.Tensor:
    """One ``loss_fn_inputs`` tensor, checked before anything is allocated from it.

    ``length`` is the datum's number of model-input tokens: a tensor is [N] or [N, K], so more
    than ``length * MAX_TOPK`` elements can only be an attempt to make the server allocate (a
    sparse tensor's shape costs nothing to send). Float values must be finite: one NaN weight
    turns the whole adapter into NaN.
    """
    dtype = _DTYPES.get(message.dtype)
    if dtype is None:
        raise ProtocolError(f"{where}: unsupported tensor dtype {message.dtype}")
    shape = [int(s) for s in message.shape]
    if any(s < 0 for s in shape) or len(shape) > 2:
        raise ProtocolError(f"{where}: invalid shape {shape}; loss inputs are [N] or [N, K]")
    if math.prod(shape) > max(length, 1) * MAX_TOPK:
        raise ProtocolError(f"{where}: shape {shape} is far larger than the datum's {length} tokens allow")
    encoding = message.WhichOneof("encoding")
    try:
        if encoding == "sparse_csr":
            array = _dense_from_csr(message.sparse_csr, shape, dtype, where)
        else:
            array = np.frombuffer(message.dense, dtype=dtype).copy()
            if shape:
                array = array.reshape(shape)
    except ValueError as error:
        raise ProtocolError(f"{where}: {error}") from None
    if dtype == np.float32 and not np.isfinite(array).all():
        raise ProtocolError(f"{where}: values must be finite numbers (found NaN or infinity)")
    tensor = torch.from_numpy(array)
    return tensor.float() if dtype == np.float32 else tensor.long()


def _dense_from_csr(csr: pb.SparseCsr, shape: list[int], dtype: type, where: str) -> np.ndarray:
    """A dense array from CSR parts, every index checked (torch would raise or read past them)."""
    if len(shape) != 2:
        raise ProtocolError(f"{where}: a sparse tensor needs a 2-D shape, got {shape}")
    rows, cols = shape
    values = np.frombuffer(csr.values, dtype=dtype)
    crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
    col = np.frombuffer(csr.col_indices, dtype=np.int64)
    if len(crow) != rows + 1 or (len(crow) and crow[0] != 0):
        raise ProtocolError(f"{where}: sparse crow_indices must have {rows + 1} entries starting at 0")
    if (np.diff(crow) < 0).any() or crow[-1] != len(col) or len(col) != len(values):
        raise ProtocolError(
            f"{where}: sparse crow_indices must not decrease and end at the number of values "
            f"({len(values)}), which must equal the number of col_indices ({len(col)})"
        )
    if len(col) and (col.min() < 0 or col.max() >= cols):
        raise ProtocolError(f"{where}: sparse col_indices must be in [0, {cols})")
    dense = np.zeros((rows, cols), dtype=dtype)
    row_of = np.repeat(np.arange(rows), np.diff(crow))
    np.add.at(dense, (row_of, col), values)  # duplicates add up, as in torch
    return dense


def _chunks_to_tokens(chunks, where: str) -> list[int]:
    tokens: list[int] = []
    for chunk in chunks:
        kind = chunk.WhichOneof("chunk")
        if kind not in (None, "encoded_text"):
            raise ProtocolError(f"{where}: only text input is supported by this server, got a {kind} chunk")
        data = chunk.encoded_text.tokens
        if len(data) % 4:
            raise ProtocolError(f"{where}: encoded_text.tokens must be int32 values ({len(data)} bytes)")
        tokens.extend(np.frombuffer(data, dtype=np.int32).tolist())
    return tokens


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except Exception as error:  # protobuf raises its own DecodeError
        raise ProtocolError(
            f"forward_backward body is not a ForwardBackwardRequest protobuf: {error}"
        ) from None
    config: dict[str, float] = {}
    for key, value in message.loss_fn_config.items():
        config[key] = float(value)
    for key, value in message.loss_fn_config_v2.items():
        if value.WhichOneof("value") == "text":
            raise ProtocolError(f"loss_fn_config[{key!r}] is text; the built-in losses take numbers")
        config[key] = float(value.number)
    for key, value in config.items():
        if not math.isfinite(value):
            raise ProtocolError(f"loss_fn_config[{key!r}] must be a finite number, got {value}")
    data = []
    for index, datum in enumerate(message.data):
        where = f"datum {index}"
        tokens = _chunks_to_tokens(datum.model_input, where)
        inputs = {
            name: _tensor(tensor, f"{where} {name}", len(tokens))
            for name, tensor in datum.loss_fn_inputs.items()
        }
        data.append(Datum(tokens=tokens, inputs=inputs))
    if not message.model_id:
        raise ProtocolError("forward_backward: missing model_id")
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


# ----- validated JSON requests to engine types ------------------------------------------------


def adam_params(params: requests.AdamParams) -> AdamParams:
    return AdamParams(
        learning_rate=params.learning_rate,
        beta1=params.beta1,
        beta2=params.beta2,
        eps=params.eps,
        weight_decay=params.weight_decay,
        grad_clip_norm=params.grad_clip_norm,
    )


def lora_settings(config: requests.LoraConfig) -> LoraSettings:
    return LoraSettings(
        rank=config.rank,
        seed=config.seed,
        train_mlp=config.train_mlp,
        train_attn=config.train_attn,
        train_unembed=config.train_unembed,
    )


def sampling_request(body: requests.Sample, prompt: list[int], eos_ids: set[int]) -> SamplingRequest:
    """The ``asample`` body as a :class:`SamplingRequest`.

    ``stop``: ``None`` stops at end-of-sequence (``eos_ids``); strings stop there too; token ids
    replace the end-of-sequence ids; ``[]`` disables every stop, as the SDK documents.
    """
    params = body.sampling_params
    stop = params.stop
    stop_strings: list[str] = []
    stop_ids: list[int] = sorted(eos_ids)
    if isinstance(stop, str):
        stop_strings = [stop]
    elif isinstance(stop, list):
        if not stop:
            stop_ids = []
        elif isinstance(stop[0], str):
            stop_strings = list(stop)
        else:
            stop_ids = list(stop)
    last_n = body.prompt_logprobs_last_n
    if last_n is not None and not 1 <= last_n <= len(prompt) - 1:
        raise ProtocolError(
            f"asample.prompt_logprobs_last_n must be between 1 and {len(prompt) - 1} (the prompt length - 1)"
        )
    return SamplingRequest(
        prompt=prompt,
        num_samples=body.num_samples,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        seed=params.seed,
        stop_strings=stop_strings,
        stop_token_ids=stop_ids,
        prompt_logprobs=bool(body.prompt_logprobs),
        topk_prompt_logprobs=body.topk_prompt_logprobs,
        prompt_logprobs_last_n=last_n,
    )
