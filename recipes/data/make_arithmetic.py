"""Generate the arithmetic example datasets for the GRPO math card.

    python recipes/data/make_arithmetic.py           # (re)write math-arithmetic.jsonl and .eval.jsonl
    python recipes/data/make_arithmetic.py --check   # exit 1 if the committed files are stale

Deterministic (fixed seed, no timestamps): rerunning writes byte-identical files. The problems are easy
on purpose, one- and two-digit addition and subtraction and small multiplication, as expressions and
short word problems, so that a 135M-parameter model gets some of them right and GRPO has a signal.
Every row is {"prompt", "metadata": {"answer"}}; about a quarter use the chat-message prompt form.
"""

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20260
TRAIN_ROWS = 200
EVAL_ROWS = 50
DATA_DIR = Path(__file__).resolve().parent
TRAIN_FILE = DATA_DIR / "math-arithmetic.jsonl"
EVAL_FILE = DATA_DIR / "math-arithmetic.eval.jsonl"
INSTRUCTION = "Give the final answer as a number in \\boxed{}."
SYSTEM_PROMPT = "You are a careful math tutor. Solve the problem briefly."

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jamal", "Kai", "Lena"]
THINGS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "cards", "shells"]


def _expression(rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(["add", "add", "sub", "mul"])
    if kind == "add":
        a, b = rng.randint(1, 60), rng.randint(1, 39)
        return f"What is {a} + {b}?", a + b
    if kind == "sub":
        a = rng.randint(10, 99)
        b = rng.randint(1, a)
        return f"What is {a} - {b}?", a - b
    a, b = rng.randint(2, 12), rng.randint(2, 9)
    return f"What is {a} \u00d7 {b}?", a * b


def _word_problem(rng: random.Random) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kind = rng.choice(["groups", "more", "fewer", "rows"])
    if kind == "groups":
        boxes, each = rng.randint(2, 9), rng.randint(2, 12)
        question = f"A shop has {boxes} boxes with {each} {thing} in each box. How many {thing} are there?"
        return question, boxes * each
    if kind == "more":
        start, extra = rng.randint(3, 50), rng.randint(2, 30)
        question = f"{name} has {start} {thing} and gets {extra} more. How many {thing} does {name} have now?"
        return question, start + extra
    if kind == "fewer":
        start = rng.randint(10, 80)
        given = rng.randint(1, start - 1)
        question = (
            f"{name} had {start} {thing} and gave {given} of them to a friend. "
            f"How many {thing} does {name} have left?"
        )
        return question, start - given
    rows, seats = rng.randint(2, 10), rng.randint(2, 10)
    question = f"A room has {rows} rows of chairs with {seats} chairs in each row. How many chairs are there?"
    return question, rows * seats


def build_rows() -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows): distinct problems, so the two splits never share a prompt."""
    rng = random.Random(SEED)
    problems: dict[str, int] = {}
    while len(problems) < TRAIN_ROWS + EVAL_ROWS:
        question, answer = _word_problem(rng) if rng.random() < 0.4 else _expression(rng)
        problems.setdefault(question, answer)
    rows = []
    for index, (question, answer) in enumerate(problems.items()):
        text = f"{question} {INSTRUCTION}"
        if index % 4 == 3:
            prompt: str | list[dict] = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": text},
            ]
        else:
            prompt = text
        rows.append({"prompt": prompt, "metadata": {"answer": str(answer)}})
    return rows[:TRAIN_ROWS], rows[TRAIN_ROWS:]


def render(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from a fresh build")
    args = parser.parse_args()
    train, held_out = build_rows()
    stale = []
    for path, rows in ((TRAIN_FILE, train), (EVAL_FILE, held_out)):
        content = render(rows)
        if args.check:
            if not path.exists() or path.read_bytes() != content:
                stale.append(path.name)
        else:
            path.write_bytes(content)
            print(f"wrote {path} ({len(rows)} rows)")
    if stale:
        print(f"stale: {', '.join(stale)}; run: python recipes/data/make_arithmetic.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
