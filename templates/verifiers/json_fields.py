"""Structured-output verifier: the completion must be JSON matching metadata.schema and/or metadata.expected.

The JSON is the whole completion, else the last ```json (or plain ```) block that parses, else the first
top-level {...} object in the text. The schema is a small JSON-Schema subset implemented here (type,
properties, required, items, enum; other keywords are ignored). Partial credit: the reward is the
fraction of checks passed, where the checks are

- parsed: the completion contains JSON at all;
- schema: the whole document is valid against metadata.schema (when given);
- one per required field: present and valid against its property schema;
- one per expected field: present and equal to metadata.expected[field] (numbers by value, so 3 == 3.0,
  but true is not 1; strings exactly).

Standard library only: this file is inlined into the generated training loop.
"""

import json
import re

_JSON_THINK_END = "</think>"
_JSON_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_JSON_MAX_OBJECT_ATTEMPTS = 64  # "{" positions tried when scanning prose for an object
_JSON_MAX_DEPTH = 32  # deeper schemas or documents are invalid rather than a RecursionError
_JSON_TYPES = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "number": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    "integer": lambda value: (
        (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, float) and value.is_integer())
    ),
}


def _json_reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # json.loads accepts NaN and Infinity by default


def _json_loads(text: str) -> tuple[bool, object]:
    try:
        return True, json.loads(text, parse_constant=_json_reject_constant)
    except (ValueError, RecursionError):
        return False, None


def _json_extract_document(text: str) -> tuple[bool, object]:
    """(found, value): the whole text, else the last fenced json/plain block, else the first {...} object."""
    parsed, value = _json_loads(text.strip())
    if parsed:
        return True, value
    for tag, body in reversed(_JSON_FENCE_RE.findall(text)):
        if tag.lower() in ("json", "jsonc", ""):
            parsed, value = _json_loads(body.strip())
            if parsed:
                return True, value
    decoder = json.JSONDecoder(parse_constant=_json_reject_constant)
    start = text.find("{")
    for _ in range(_JSON_MAX_OBJECT_ATTEMPTS):
        if start < 0:
            break
        try:
            return True, decoder.raw_decode(text, start)[0]
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
    return False, None


def _json_schema_valid(value: object, schema: object, depth: int = 0) -> bool:
    """Validate value against the supported subset: type, enum, properties, required, items."""
    if not isinstance(schema, dict):
        return True  # an empty or boolean-less schema accepts everything
    if depth > _JSON_MAX_DEPTH:
        return False
    expected_type = schema.get("type")
    if expected_type is not None:
        names = expected_type if isinstance(expected_type, list) else [expected_type]
        if not any(name in _JSON_TYPES and _JSON_TYPES[name](value) for name in names):
            return False
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_json_equal(value, option) for option in enum):
        return False
    if isinstance(value, dict):
        required = schema.get("required")
        if isinstance(required, list) and any(key not in value for key in required):
            return False
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, subschema in properties.items():
                if key in value and not _json_schema_valid(value[key], subschema, depth + 1):
                    return False
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return all(_json_schema_valid(item, schema["items"], depth + 1) for item in value)
    return True


def _json_equal(actual: object, expected: object) -> bool:
    """Deep JSON equality: numbers by value (3 == 3.0), booleans only equal booleans."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return actual == expected  # exact, and Python compares int with float without rounding
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_json_equal(actual[key], expected[key]) for key in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_json_equal(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return type(actual) is type(expected) and actual == expected


def metadata_problem(metadata: dict) -> str | None:
    """Why a row's metadata cannot be graded (checked on every row before training), or None."""
    if not isinstance(metadata, dict):
        return "must be an object"
    for key in ("schema", "expected"):
        if key in metadata and not isinstance(metadata[key], dict):
            return f'"{key}" must be an object'
    if not isinstance(metadata.get("schema"), dict) and not isinstance(metadata.get("expected"), dict):
        return 'needs "schema" (a JSON Schema object) and/or "expected" (the fields\' values)'
    return None


def verify(completion: str, metadata: dict) -> dict[str, float]:
    """Score JSON output against metadata["schema"] and/or metadata["expected"] (a dict field -> value).

    Returns reward (fraction of checks passed, see the module docstring), correct (1.0 when every check
    passes), parsed, fields_matched and fields_total (fields named by schema.required or expected; a
    field matches when all of its checks pass) and metadata_ok (0.0 when neither a schema nor expected
    fields are given, which scores 0). Never raises.
    """
    schema = metadata.get("schema") if isinstance(metadata, dict) else None
    expected = metadata.get("expected") if isinstance(metadata, dict) else None
    schema = schema if isinstance(schema, dict) else None
    expected = expected if isinstance(expected, dict) else None
    if schema is None and expected is None:
        return {
            "reward": 0.0,
            "correct": 0.0,
            "parsed": 0.0,
            "fields_matched": 0.0,
            "fields_total": 0.0,
            "metadata_ok": 0.0,
        }
    text = completion if isinstance(completion, str) else ""
    if _JSON_THINK_END in text:
        text = text.rsplit(_JSON_THINK_END, 1)[1]
    parsed, document = _json_extract_document(text)

    required = schema.get("required") if schema is not None else None
    required = [key for key in required if isinstance(key, str)] if isinstance(required, list) else []
    properties = schema.get("properties") if schema is not None else None
    properties = properties if isinstance(properties, dict) else {}
    fields = list(dict.fromkeys([*required, *(expected or {})]))  # ordered union

    checks = [parsed]
    if schema is not None:
        checks.append(parsed and _json_schema_valid(document, schema))
    fields_matched = 0
    for field in fields:
        present = parsed and isinstance(document, dict) and field in document
        field_checks = []
        if field in required:
            field_checks.append(present and _json_schema_valid(document[field], properties.get(field)))
        if expected is not None and field in expected:
            field_checks.append(present and _json_equal(document[field], expected[field]))
        checks.extend(field_checks)
        fields_matched += all(field_checks)
    passed = sum(1 for check in checks if check)
    return {
        "reward": passed / len(checks),
        "correct": 1.0 if passed == len(checks) else 0.0,
        "parsed": 1.0 if parsed else 0.0,
        "fields_matched": float(fields_matched),
        "fields_total": float(len(fields)),
        "metadata_ok": 1.0,
    }
