"""The JSON Schema (Draft 2020-12) of a recipe card.

`card_schema()` builds it from the fields table (`catalog/fields.yaml`) and the catalog, so the
enums an editor offers are the names rtc knows;
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
    """The schema of a card, from the fields table (catalog/fields.yaml) and the catalog's names."""
    catalog = load_catalog()
    names = {
        "signals": catalog.signals,
        "methods": catalog.methods,
        "tasks": catalog.tasks,
        "models": catalog.models,
        "losses": catalog.losses,
    }
    loss_options = sorted({opt.name for loss in catalog.losses.values() for opt in loss.config})
    properties = {}
    for field in catalog.fields.values():
        spec = {"enum": sorted(names[field.enum])} if field.enum else dict(field.schema)
        if field.name == "loss_config":
            spec["propertyNames"] = {"enum": loss_options}
        if field.name == "tools":
            spec["items"] = {"enum": sorted(catalog.tools)}
        if field.name == "tool_timeouts":
            spec["propertyNames"] = {"enum": sorted(catalog.tools)}
        spec["description"] = field.doc
        properties[field.name] = spec
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "rtc recipe card",
        "description": "A recipe card: what to train, on which model, with which loss. "
        "`rtc compile CARD` turns it into one standalone Tinker training loop.",
        "type": "object",
        "additionalProperties": False,
        "required": [f.name for f in catalog.fields.values() if f.required],
        "properties": properties,
    }


def schema_text() -> str:
    """The schema as written to `card.schema.json` (stable key order, trailing newline)."""
    return json.dumps(card_schema(), indent=2, ensure_ascii=False) + "\n"
