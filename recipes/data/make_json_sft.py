"""Generate the JSON-extraction demonstrations of the main job (scripts/main-job.sh).

    python recipes/data/make_json_sft.py           # (re)write sft-json.jsonl and sft-json.eval.jsonl
    python recipes/data/make_json_sft.py --check   # exit 1 if the committed files are stale

Each row asks for the name, age and city in one sentence as a JSON object, and its completion is
that object and nothing else: {"prompt", "completion"}, the demonstrations signal. The held-out
split uses people and cities that never occur in the training split, and half of its sentences
use phrasings the training split never shows, so a model that scores there has learnt the format
and the copying, not the rows. Deterministic (fixed seed, no timestamps): rerunning writes
byte-identical files.
"""

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20261
TRAIN_ROWS = 160
EVAL_ROWS = 40
DATA_DIR = Path(__file__).resolve().parent
TRAIN_FILE = DATA_DIR / "sft-json.jsonl"
EVAL_FILE = DATA_DIR / "sft-json.eval.jsonl"
INSTRUCTION = 'Reply with only a JSON object with the keys "name", "age", "city".'

TRAIN_NAMES = [
    "Maria",
    "Kenji",
    "Tom",
    "Aisha",
    "Lukas",
    "Sofia",
    "Omar",
    "Hannah",
    "Mateo",
    "Yuki",
    "Priya",
    "Jonas",
    "Elena",
    "Samuel",
    "Leila",
    "Noah",
    "Ingrid",
    "Tariq",
    "Camille",
    "Diego",
    "Mei",
    "Oscar",
    "Zara",
    "Felix",
]
EVAL_NAMES = ["Beatriz", "Anton", "Nadia", "Ravi", "Greta", "Malik", "Chiara", "Tobias", "Amara", "Viktor"]
TRAIN_CITIES = [
    "Madrid",
    "Osaka",
    "Leeds",
    "Cairo",
    "Munich",
    "Lisbon",
    "Toronto",
    "Dublin",
    "Lima",
    "Seoul",
    "Oslo",
    "Nairobi",
    "Porto",
    "Denver",
    "Krakow",
    "Sydney",
    "Quito",
    "Hamburg",
    "Valencia",
    "Glasgow",
]
EVAL_CITIES = ["Bologna", "Tampere", "Cusco", "Ghent", "Perth", "Bergen", "Izmir", "Tucson", "Lyon", "Kyoto"]
# {n} name, {a} age, {c} city
SHARED_TEMPLATES = [
    "{n} is {a} years old and lives in {c}.",
    "{n}, aged {a}, moved to {c} last year.",
    "Our neighbour {n} lives in {c}; {n} turned {a} in May.",
    "Meet {n}: {a} years old, born and raised in {c}.",
    "At {a}, {n} still cycles to work every day in {c}.",
    "The new teacher in {c} is {n}, who is {a}.",
    "{n} ({a}) runs a small bakery in {c}.",
    "Last week {n} celebrated turning {a} at home in {c}.",
]
EVAL_ONLY_TEMPLATES = [
    "In {c}, a {a}-year-old named {n} won the chess tournament.",
    "Applicant: {n}. Age: {a}. Current city: {c}.",
    "{n} has lived in {c} since moving there and is now {a}.",
]


def _row(rng: random.Random, names: list[str], cities: list[str], templates: list[str]) -> dict:
    name, city, age = rng.choice(names), rng.choice(cities), rng.randint(19, 78)
    sentence = rng.choice(templates).format(n=name, a=age, c=city)
    prompt = f"Extract the fields from this sentence: {sentence}\n{INSTRUCTION}"
    completion = json.dumps({"name": name, "age": age, "city": city})
    return {"prompt": prompt, "completion": completion}


def _rows(rng: random.Random, count: int, names: list[str], cities: list[str], templates) -> list[dict]:
    """``count`` rows with distinct prompts; ``templates(i)`` gives the phrasings of row ``i``."""
    rows: list[dict] = []
    seen: set[str] = set()
    while len(rows) < count:
        row = _row(rng, names, cities, templates(len(rows)))
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            rows.append(row)
    return rows


def make() -> tuple[list[dict], list[dict]]:
    rng = random.Random(SEED)
    train = _rows(rng, TRAIN_ROWS, TRAIN_NAMES, TRAIN_CITIES, lambda i: SHARED_TEMPLATES)
    held_out = _rows(
        rng, EVAL_ROWS, EVAL_NAMES, EVAL_CITIES, lambda i: EVAL_ONLY_TEMPLATES if i % 2 else SHARED_TEMPLATES
    )
    return train, held_out


def render(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    args = parser.parse_args()
    train, held_out = make()
    stale = [
        path.name
        for path, rows in ((TRAIN_FILE, train), (EVAL_FILE, held_out))
        if not path.is_file() or path.read_bytes() != render(rows)
    ]
    if args.check:
        if stale:
            print(f"stale: {', '.join(stale)}; run python recipes/data/make_json_sft.py", file=sys.stderr)
            return 1
        return 0
    TRAIN_FILE.write_bytes(render(train))
    EVAL_FILE.write_bytes(render(held_out))
    print(f"wrote {TRAIN_FILE.name} ({len(train)} rows) and {EVAL_FILE.name} ({len(held_out)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
