"""The built-in Tinker losses, per datum, on the target-token logprobs of the current model.

Each loss is a sum over tokens (not a mean), as on the hosted service: ``loss:sum`` is the sum
over every datum of a request, and the gradient of that sum is what ``forward_backward``
accumulates. Inputs are aligned with ``target_tokens``: position ``i`` scores the token that
follows ``model_input[i]``.

- ``cross_entropy``: ``-sum(weights * logprobs)``; targets ``[N]`` or top-K ``[N, K]`` with
  weights of the same shape.
- ``importance_sampling``: ``-sum(ratio * advantages)``, ``ratio = exp(logprobs - sampler logprobs)``.
- ``ppo``: ``-sum(min(ratio * A, clip(ratio, low, high) * A))``.
- ``cispo``: ``-sum(stopgrad(clip(ratio, low, high)) * A * logprobs)``.
- ``dro``: ``-sum(A * logprobs - beta / 2 * (logprobs - sampler logprobs) ** 2)``.

``clip_low_threshold`` and ``clip_high_threshold`` are ratio bounds (0.8 and 1.2 by default),
taken from ``loss_fn_config`` or, per token, from ``loss_fn_inputs``. ``dro``'s ``beta``
defaults to 0.05.

The RL losses read ``advantages``, not ``weights``: a ``weights`` input is accepted (loops
built for cross-entropy often carry one along) but has no effect, so scaling it changes
nothing. Unknown inputs and config keys are refused, so a misspelt key cannot pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RL_LOSSES = ("importance_sampling", "ppo", "cispo", "dro")
LOSSES = ("cross_entropy", *RL_LOSSES)

# loss -> (required inputs, optional inputs, config keys with defaults)
_SPEC: dict[str, tuple[frozenset[str], frozenset[str], dict[str, float]]] = {
    "cross_entropy": (frozenset({"target_tokens"}), frozenset({"weights"}), {}),
    "importance_sampling": (
        frozenset({"target_tokens", "logprobs", "advantages"}),
        frozenset({"weights"}),
        {},
    ),
    "ppo": (
        frozenset({"target_tokens", "logprobs", "advantages"}),
        frozenset({"clip_low_threshold", "clip_high_threshold", "weights"}),
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ),
    "cispo": (
        frozenset({"target_tokens", "logprobs", "advantages"}),
        frozenset({"clip_low_threshold", "clip_high_threshold", "weights"}),
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ),
    "dro": (frozenset({"target_tokens", "logprobs", "advantages"}), frozenset({"weights"}), {"beta": 0.05}),
}
# Inputs the SDK may attach that no built-in loss reads; accepted and ignored.
_IGNORED_INPUTS = frozenset({"sequence_ratio_mask", "mask"})


class LossInputError(ValueError):
    """A request whose loss name, config or inputs do not fit the loss; answered with 400."""


@dataclass(frozen=True)
class LossSpec:
    name: str
    config: dict[str, float]


def check_loss(name: str, config: dict[str, float]) -> LossSpec:
    """Validate the loss name and config keys; fill config defaults."""
    if name not in _SPEC:
        raise LossInputError(f"unknown or unsupported loss_fn {name!r}; this server runs {', '.join(LOSSES)}")
    _, _, defaults = _SPEC[name]
    unknown = set(config) - set(defaults)
    if unknown:
        allowed = ", ".join(sorted(defaults)) or "none"
        raise LossInputError(
            f"loss_fn_config keys {sorted(unknown)} are not used by {name} (allowed: {allowed})"
        )
    filled = {**defaults, **{key: float(value) for key, value in config.items()}}
    if name in ("ppo", "cispo") and not filled["clip_low_threshold"] <= filled["clip_high_threshold"]:
        raise LossInputError("clip_low_threshold must not exceed clip_high_threshold")
    return LossSpec(name, filled)


def check_inputs(spec: LossSpec, inputs: dict[str, torch.Tensor], length: int, index: int) -> None:
    """Check one datum's ``loss_fn_inputs`` against the loss and the model input length."""
    required, optional, _ = _SPEC[spec.name]
    missing = required - set(inputs)
    if missing:
        raise LossInputError(f"datum {index}: {spec.name} needs loss_fn_inputs {sorted(missing)}")
    unknown = set(inputs) - required - optional - _IGNORED_INPUTS
    if unknown:
        raise LossInputError(f"datum {index}: loss_fn_inputs {sorted(unknown)} are not used by {spec.name}")
    targets = inputs["target_tokens"]
    if targets.dim() not in (1, 2) or targets.shape[0] != length:
        raise LossInputError(
            f"datum {index}: target_tokens has shape {list(targets.shape)}, expected [{length}] "
            f"or [{length}, K] to match the model input of {length} tokens"
        )
    if targets.dim() == 2 and spec.name != "cross_entropy":
        raise LossInputError(f"datum {index}: top-K targets [N, K] are only supported by cross_entropy")
    for key, value in inputs.items():
        if key == "target_tokens" or key in _IGNORED_INPUTS:
            continue
        if list(value.shape) != list(targets.shape):
            raise LossInputError(
                f"datum {index}: {key} has shape {list(value.shape)}, expected {list(targets.shape)} "
                "like target_tokens"
            )


def datum_loss(spec: LossSpec, logprobs: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Elementwise loss of one datum, the same shape as its targets; sum it for the loss."""
    if spec.name == "cross_entropy":
        weights = inputs.get("weights")
        if weights is None:
            weights = torch.ones_like(logprobs)
        return -weights * logprobs

    old = inputs["logprobs"]
    advantages = inputs["advantages"]
    ratio = torch.exp(logprobs - old)
    if spec.name == "importance_sampling":
        return -ratio * advantages
    if spec.name == "dro":
        beta = spec.config["beta"]
        return -(advantages * logprobs - 0.5 * beta * (logprobs - old) ** 2)

    low = inputs.get("clip_low_threshold", torch.full_like(ratio, spec.config["clip_low_threshold"]))
    high = inputs.get("clip_high_threshold", torch.full_like(ratio, spec.config["clip_high_threshold"]))
    clipped = torch.minimum(torch.maximum(ratio, low), high)
    if spec.name == "ppo":
        return -torch.minimum(ratio * advantages, clipped * advantages)
    # cispo: the clipped ratio is a constant weight on the policy-gradient term.
    return -clipped.detach() * advantages * logprobs
