"""The example datasets in recipes/data/: shape per signal, splits, and reference answers that verify."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "recipes" / "data"

# file stem -> (signal, train rows, eval rows)
DATASETS = {
    "math-arithmetic": ("environment", 200, 50),
    "code-python": ("environment", 12, 4),
    "json-extract": ("environment", 12, 4),
    "match-capitals": ("environment", 16, 6),
    "dpo-chat": ("preferences", 24, 6),
    "sft-chat": ("demonstrations", 24, 6),
    "sft-json": ("demonstrations", 160, 40),
    "tool-agents": ("demonstrations", 12, 4),
    "tool-questions": ("environment", 400, 47),
    "tool-traces": ("demonstrations", 240, 24),
    "rlhf-sft": ("demonstrations", 40, 8),
    "rlhf-prefs": ("preferences", 80, 16),
    "rlhf-prompts": ("environment", 40, 8),
    "rubric-chat": ("environment", 12, 4),
}
# Not rows of a signal: the documents the tool-agents search and lookup tools read.
CORPORA = {"tool-corpus"}
# Scored by a model (a reward model, a rubric judge with the card's rubric): their metadata may be empty.
MODEL_SCORED = {"rlhf-prompts", "rubric-chat"}
# Preference sets with several pairs per prompt (the reward model sees each prompt answered both ways).
PAIRS_PER_PROMPT = {"rlhf-prefs": 2}
SIGNAL_KEYS = {
    "environment": {"prompt", "metadata"},
    "preferences": {"prompt", "chosen", "rejected"},
    "demonstrations": {"prompt", "completion"},
}

# Reference solutions for code-python(.eval).jsonl, kept here so that the rows stay clean.
CODE_SOLUTIONS = {
    "add_numbers": "def add_numbers(a, b):\n    return a + b\n",
    "is_even": "def is_even(n):\n    return n % 2 == 0\n",
    "reverse_string": "def reverse_string(s):\n    return s[::-1]\n",
    "max_of_list": (
        "def max_of_list(xs):\n    best = xs[0]\n    for x in xs[1:]:\n        if x > best:\n"
        "            best = x\n    return best\n"
    ),
    "count_vowels": "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
    "factorial": (
        "def factorial(n):\n    result = 1\n    for k in range(2, n + 1):\n"
        "        result *= k\n    return result\n"
    ),
    "fizzbuzz": (
        "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n"
        "        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n"
    ),
    "is_palindrome": (
        "def is_palindrome(s):\n    letters = s.replace(' ', '').lower()\n"
        "    return letters == letters[::-1]\n"
    ),
    "sum_of_squares": "def sum_of_squares(n):\n    return sum(k * k for k in range(1, n + 1))\n",
    "celsius_to_fahrenheit": "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
    "unique_sorted": "def unique_sorted(xs):\n    return sorted(set(xs))\n",
    "word_count": "def word_count(s):\n    return len(s.split())\n",
    "fibonacci": (
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
    ),
    "capitalize_words": (
        "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n"
    ),
    "min_max": "def min_max(xs):\n    return (min(xs), max(xs))\n",
    "is_prime": (
        "def is_prime(n):\n    if n < 2:\n        return False\n    k = 2\n    while k * k <= n:\n"
        "        if n % k == 0:\n            return False\n        k += 1\n    return True\n"
    ),
}


def load_rows(path):
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            assert line.endswith("\n") and line.strip(), f"{path.name}:{number}: blank or unterminated line"
            row = json.loads(line)
            assert isinstance(row, dict), f"{path.name}:{number}: not an object"
            rows.append(row)
    return rows


def split(stem):
    return load_rows(DATA_DIR / f"{stem}.jsonl"), load_rows(DATA_DIR / f"{stem}.eval.jsonl")


def all_rows(stem):
    train, held_out = split(stem)
    return train + held_out


def prompt_key(prompt):
    return json.dumps(prompt, sort_keys=True)


def check_prompt(prompt, where):
    if isinstance(prompt, str):
        assert prompt.strip(), where
        return
    assert isinstance(prompt, list) and prompt, where
    for message in prompt:
        assert set(message) == {"role", "content"}, where
        assert message["role"] in {"system", "user", "assistant"}, where
        assert isinstance(message["content"], str) and message["content"].strip(), where
    assert prompt[-1]["role"] == "user", where


def check_turns(turns, where):
    """Assistant turns (tool calls or the answer) and tool results; every call answered; an answer last."""
    assert turns and turns[-1]["role"] == "assistant" and turns[-1]["content"].strip(), where
    open_calls = []
    for message in turns:
        assert message["role"] in {"assistant", "tool"}, where
        if message["role"] == "tool":
            assert message["tool_call_id"] == open_calls.pop(0), where
        for call in message.get("tool_calls", []):
            json.loads(call["function"]["arguments"])
            open_calls.append(call["id"])
    assert not open_calls, where


def test_no_unexpected_files():
    stems = {
        path.name.removesuffix(".eval.jsonl").removesuffix(".jsonl") for path in DATA_DIR.glob("*.jsonl")
    }
    assert stems == set(DATASETS) | CORPORA


@pytest.mark.parametrize("stem", sorted(DATASETS))
def test_rows_have_the_keys_and_types_of_their_signal(stem):
    signal, train_size, eval_size = DATASETS[stem]
    train, held_out = split(stem)
    assert (len(train), len(held_out)) == (train_size, eval_size)
    for number, row in enumerate(train + held_out, start=1):
        where = f"{stem} row {number}"
        assert set(row) == SIGNAL_KEYS[signal], where
        check_prompt(row["prompt"], where)
        if signal == "environment":
            assert isinstance(row["metadata"], dict), where
            assert row["metadata"] or stem in MODEL_SCORED, where
        else:
            for key in SIGNAL_KEYS[signal] - {"prompt"}:
                if isinstance(row[key], list):  # a demonstration given as turns: calls, results, answer
                    check_turns(row[key], where)
                else:
                    assert isinstance(row[key], str) and row[key].strip(), where
        if signal == "preferences":
            assert row["chosen"] != row["rejected"], where


@pytest.mark.parametrize("stem", sorted(DATASETS))
def test_train_and_eval_do_not_overlap(stem):
    train, held_out = split(stem)
    train_prompts = {prompt_key(row["prompt"]) for row in train}
    pairs = PAIRS_PER_PROMPT.get(stem, 1)
    assert len(train_prompts) * pairs == len(train), "duplicate prompts in the train split"
    assert not train_prompts & {prompt_key(row["prompt"]) for row in held_out}


def test_both_prompt_forms_are_used():
    forms = {type(row["prompt"]).__name__ for stem in DATASETS for row in all_rows(stem)}
    assert forms == {"str", "list"}


def test_arithmetic_generator_is_reproducible():
    spec = importlib.util.spec_from_file_location("_rtc_make_arithmetic", DATA_DIR / "make_arithmetic.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    train, held_out = generator.build_rows()
    assert generator.render(train) == (DATA_DIR / "math-arithmetic.jsonl").read_bytes()
    assert generator.render(held_out) == (DATA_DIR / "math-arithmetic.eval.jsonl").read_bytes()


def test_json_sft_generator_is_reproducible_and_holds_out_people_and_cities():
    spec = importlib.util.spec_from_file_location("_rtc_make_json_sft", DATA_DIR / "make_json_sft.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    train, held_out = generator.make()
    assert generator.render(train) == (DATA_DIR / "sft-json.jsonl").read_bytes()
    assert generator.render(held_out) == (DATA_DIR / "sft-json.eval.jsonl").read_bytes()
    seen = [json.loads(row["completion"]) for row in train]
    for row in held_out:
        wanted = json.loads(row["completion"])
        assert all(wanted["name"] != s["name"] and wanted["city"] != s["city"] for s in seen)
        assert str(wanted["age"]) in row["prompt"] and wanted["name"] in row["prompt"]


def prompt_text(prompt):
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def recompute_arithmetic(question):
    """The answer of a generated problem, worked out again from its text."""
    a, b = (int(number) for number in re.findall(r"\d+", question)[:2])
    if re.match(r"What is \d+ \+", question) or " more." in question:
        return a + b
    if re.match(r"What is \d+ -", question) or " gave " in question:
        return a - b
    assert "\u00d7" in question or " in each " in question, question
    return a * b


def test_arithmetic_answers_are_right_and_verify(math_verify):
    for row in all_rows("math-arithmetic"):
        question = prompt_text(row["prompt"])
        answer = row["metadata"]["answer"]
        assert "\\boxed{}" in question
        assert re.fullmatch(r"\d+", answer)
        assert recompute_arithmetic(question) == int(answer), question
        assert math_verify(f"The result is \\boxed{{{answer}}}.", row["metadata"])["reward"] == 1.0
        assert math_verify(f"\\boxed{{{int(answer) + 1}}}", row["metadata"])["reward"] == 0.0


def test_code_reference_solutions_pass_and_tests_are_not_vacuous(code_verify):
    rows = all_rows("code-python")
    assert {row["metadata"]["entry_point"] for row in rows} == set(CODE_SOLUTIONS)
    for row in rows:
        metadata = row["metadata"]
        assert isinstance(metadata["tests"], list) and all(t.startswith("assert ") for t in metadata["tests"])
        solution = CODE_SOLUTIONS[metadata["entry_point"]]
        scores = code_verify(f"```python\n{solution}```", metadata)
        assert scores["reward"] == 1.0, (metadata["entry_point"], scores)
        stub = f"def {metadata['entry_point']}(*args):\n    return None\n"
        assert code_verify(stub, metadata)["reward"] == 0.0, metadata["entry_point"]


def test_json_expected_values_verify(json_verify):
    for row in all_rows("json-extract"):
        metadata = row["metadata"]
        assert set(metadata) == {"schema", "expected"}
        assert set(metadata["expected"]) == set(metadata["schema"]["required"])
        completion = "```json\n" + json.dumps(metadata["expected"], ensure_ascii=False) + "\n```"
        assert json_verify(completion, metadata)["reward"] == 1.0, row
        assert json_verify("{}", metadata)["reward"] < 0.5


def test_match_answers_verify(match_verify):
    rows = all_rows("match-capitals")
    assert sum("pattern" in row["metadata"] for row in rows) >= 2
    for row in rows:
        metadata = row["metadata"]
        assert match_verify(metadata["answer"], metadata)["reward"] == 1.0, row
        assert match_verify(f"Answer: {metadata['answer']}.", metadata)["reward"] == 1.0, row
        if "pattern" in metadata:
            assert match_verify(metadata["answer"], {"pattern": metadata["pattern"]})["reward"] == 1.0, row
        assert match_verify("I don't know", metadata)["reward"] == 0.0


def test_tool_trajectories_are_messages_with_calls_the_prompt_declares():
    """Tool traces are message lists (8.4): the model's calls, the tools' results, a short answer;
    never tool output written into the model's own text."""
    for row in all_rows("tool-agents"):
        assert isinstance(row["prompt"], list) and isinstance(row["completion"], list)
        check_turns(row["completion"], row["prompt"][-1]["content"])
        for message in row["completion"]:
            assert "<observation>" not in message["content"] and "<tool_call>" not in message["content"]
            for call in message.get("tool_calls", []):
                assert call["function"]["name"] in row["prompt"][0]["content"]
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
        assert len(row["completion"][-1]["content"].split()) < 60
