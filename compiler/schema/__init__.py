"""The JSON Schema (Draft 2020-12) of a recipe card.

`card_schema()` builds it from the catalog, so the enums an editor offers are the names rtc knows;
`card.schema.json` beside this file is the same schema written out for editors
(`# yaml-language-server: $schema=...`). `rtc build` rewrites the file and `rtc build --check`
fails when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..catalog import load_catalog

SCHEMA_FILE = Path(__file__).parent / "card.schema.json"
SCHEMA_ID = "https://rtc.invalid/schema/card.schema.json"


def card_schema() -> dict:
    catalog = load_catalog()
    loss_options = sorted({opt.name for loss in catalog.losses.values() for opt in loss.config})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "rtc recipe card",
        "description": "A recipe card: what to train, on which model, with which loss. "
        "`rtc compile CARD` turns it into one standalone Tinker training loop.",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "title", "signal", "method", "task", "model"],
        "properties": {
            "name": {
                "type": "string",
                "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$",
                "maxLength": 64,
                "description": "Slug that names the compiled file (generated/<name>.py) and the run.",
            },
            "title": {"type": "string", "minLength": 1, "maxLength": 200, "description": "One-line title."},
            "description": {"type": "string", "description": "Free text for the loop's header docstring."},
            "signal": {"enum": sorted(catalog.signals), "description": "What you have to learn from."},
            "method": {"enum": sorted(catalog.methods), "description": "How the loop learns from it."},
            "task": {"enum": sorted(catalog.tasks), "description": "Prompt convention and verifier."},
            "model": {"enum": sorted(catalog.models), "description": "Base model (see `rtc list models`)."},
            "loss": {"enum": sorted(catalog.losses), "description": "Default: the method's default loss."},
            "loss_config": {
                "type": "object",
                "propertyNames": {"enum": loss_options},
                "additionalProperties": {"type": "number"},
                "description": "Loss hyper-parameters (clip thresholds for ppo/cispo, beta for dro/dpo).",
            },
            "rank": {
                "type": "integer",
                "minimum": 1,
                "maximum": 512,
                "description": "LoRA rank. Default 32.",
            },
            "steps": {"type": "integer", "minimum": 1, "maximum": 1000000, "description": "Optimizer steps."},
            "lr": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 1,
                "description": "Adam learning rate. Default: the family LoRA rule or the method default.",
            },
            "sampling": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1048576},
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                },
                "description": "Sampling parameters for rollouts and rewrites.",
            },
            "group_size": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1024,
                "description": "Samples per prompt.",
            },
            "prompts_per_step": {"type": "integer", "minimum": 1, "maximum": 4096},
            "batch_size": {"type": "integer", "minimum": 1, "maximum": 4096, "description": "Rows per step."},
            "advantage_std": {
                "type": "boolean",
                "description": "GRPO: divide advantages by the group's reward std. Default false.",
            },
            "eval_every": {"type": "integer", "minimum": 0, "description": "Eval every N steps; 0 = never."},
            "save_every": {
                "type": "integer",
                "minimum": 0,
                "description": "Checkpoint every N steps; 0 = end.",
            },
            "seed": {"type": "integer", "minimum": 0, "description": "Data order and sampling seed."},
            "max_length": {
                "type": "integer",
                "minimum": 16,
                "description": "Longest sequence (prompt + completion) in tokens. Default: model context.",
            },
            "system_prompt": {
                "type": ["string", "null"],
                "description": "System prompt. Default: the task's; null for none.",
            },
            "data": {
                "type": "object",
                "additionalProperties": False,
                "required": ["train"],
                "properties": {
                    "train": {"type": "string", "minLength": 1},
                    "eval": {"type": "string", "minLength": 1},
                },
                "description": "Example datasets shipped with the card, relative to the card file.",
            },
        },
    }


def schema_text() -> str:
    """The schema as written to `card.schema.json` (stable key order, trailing newline)."""
    return json.dumps(card_schema(), indent=2, ensure_ascii=False) + "\n"
