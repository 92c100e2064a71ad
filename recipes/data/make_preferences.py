"""Write the RLHF example data: demonstrations, preference pairs, RL prompts and rubric prompts.

The preference pairs have one learnable property: the chosen response ends by offering more help
with a question, the rejected one with a flat closing statement of about the same length, so a
reward model that learns the pairs cannot do it by length. Held-out rows use other questions (and
some closings no training row has), so held-out accuracy measures the property, not memory.

    python recipes/data/make_preferences.py   # rewrites the rlhf-*.jsonl and rubric-*.jsonl files
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent

QA = [
    ("How do I boil an egg?", "Put it in boiling water for 7 minutes, then cool it in cold water."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ("How can I sleep better?", "Keep a fixed bedtime, a dark room, and no screens for an hour before bed."),
    ("What does a CPU do?", "It runs a program's instructions: arithmetic, logic and moving data."),
    ("How do I check my Python version?", "Run `python --version` in a terminal."),
    (
        "Why is the sky blue?",
        "Air scatters blue light more than red light, so blue reaches us from every direction.",
    ),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is a prime number?", "A whole number above 1 whose only divisors are 1 and itself."),
    ("How do I make tea?", "Pour boiling water on a tea bag and let it steep for three to five minutes."),
    ("What is photosynthesis?", "Plants turning light, water and carbon dioxide into sugar and oxygen."),
    (
        "How do I reverse a list in Python?",
        "Use `items.reverse()` in place, or `items[::-1]` for a reversed copy.",
    ),
    ("What is the boiling point of water?", "100 degrees Celsius at sea level."),
    (
        "How do I stay focused while studying?",
        "Work in 25-minute blocks with short breaks, and keep your phone away.",
    ),
    ("What is gravity?", "The pull between masses; it keeps us on the ground and the Moon in orbit."),
    ("How do I save money on groceries?", "Plan meals, shop with a list, and buy staples in bulk."),
    ("What is the largest ocean?", "The Pacific Ocean."),
    (
        "How do I start running?",
        "Begin with short run-walk intervals three times a week and build up slowly.",
    ),
    ("What is a noun?", "A word that names a person, place, thing or idea."),
    (
        "How do I clean a cast iron pan?",
        "Rinse it with hot water, scrub, dry it fully and rub in a little oil.",
    ),
    ("What is inflation?", "A general rise in prices, so money buys less over time."),
    (
        "How do I write a good email subject?",
        "Say the point in a few words, such as 'Invoice 42 due Friday'.",
    ),
    ("What causes rain?", "Water vapour cools, condenses into droplets, and they fall when heavy enough."),
    (
        "How do I learn a new language?",
        "Practise a little every day, speak early, and learn common words first.",
    ),
    ("What is DNA?", "The molecule that carries the genetic instructions of living things."),
    ("How do I fix a slow laptop?", "Close unused programs, free disk space, and check for startup apps."),
    ("What is the speed of light?", "About 300,000 kilometres per second in a vacuum."),
    (
        "How do I water a cactus?",
        "Soak the soil, then wait until it is completely dry before watering again.",
    ),
    ("What is a verb?", "A word for an action or a state, such as 'run' or 'be'."),
    (
        "How do I tie a tie?",
        "A four-in-hand knot: wrap the wide end around, up through the loop, and down the front.",
    ),
    ("What is an atom?", "The smallest unit of an element, a nucleus with electrons around it."),
    ("How do I make my password stronger?", "Use a long passphrase of random words and never reuse it."),
    ("What is the tallest mountain?", "Mount Everest, at about 8,849 metres."),
    (
        "How do I calm down before a talk?",
        "Breathe slowly, rehearse your opening, and focus on one friendly face.",
    ),
    ("What is a fraction?", "A part of a whole, written as one number over another, like 3/4."),
    ("How do I remove a coffee stain?", "Blot it, then rinse with cold water and a little dish soap."),
    ("What is a volcano?", "An opening in the Earth's crust where molten rock, ash and gas escape."),
    ("How do I back up my phone?", "Turn on your phone's cloud backup, or copy it to a computer."),
    ("What is democracy?", "Government by the people, usually through elected representatives."),
    (
        "How do I improve my handwriting?",
        "Write slowly, keep letters the same size, and practise a little daily.",
    ),
    ("What is a black hole?", "A region where gravity is so strong that not even light escapes."),
    ("How do I cook rice?", "Simmer one cup of rice in two cups of water, covered, for about 18 minutes."),
    ("What is an adjective?", "A word that describes a noun, such as 'red' or 'quick'."),
    (
        "How do I care for a houseplant?",
        "Give it the light it likes, water when the top soil is dry, and drain well.",
    ),
    ("What is the Moon made of?", "Mostly rock: silicate minerals with a small iron core."),
    ("How do I get better at chess?", "Solve tactics puzzles daily and review your own lost games."),
    ("What is a calorie?", "A unit of energy; food calories are kilocalories."),
    (
        "How do I stop procrastinating?",
        "Start with a two-minute version of the task and remove distractions.",
    ),
    ("What is electricity?", "The flow of electric charge, usually electrons moving through a wire."),
]
# The chosen response ends with one of these questions, the rejected one with a closing of about
# the same length. The last two of each are kept for held-out rows only.
FOLLOW_UPS = [
    "Would you like an example?",
    "Shall I go into more detail?",
    "Do you want a step-by-step version?",
    "Would a short example help?",
    "Want me to explain any part?",
    "Should I add a quick tip?",
]
CLOSINGS = [
    "That is the whole answer here.",
    "There is nothing more to add.",
    "That covers the main point.",
    "I hope that settles it now.",
    "That is all you need, really.",
    "That sums the topic up well.",
]


def write(name: str, rows: list[dict]) -> None:
    (HERE / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def main() -> None:
    rng = random.Random(0)
    train_qa, eval_qa = QA[:40], QA[40:]
    write("rlhf-sft.jsonl", [{"prompt": q, "completion": a} for q, a in train_qa])
    write("rlhf-sft.eval.jsonl", [{"prompt": q, "completion": a} for q, a in eval_qa])

    def pairs(qa: list[tuple[str, str]], follow_ups: list[str], closings: list[str]) -> list[dict]:
        rows = []
        for q, a in qa:
            for _ in range(2):
                rows.append(
                    {
                        "prompt": q,
                        "chosen": f"{a} {rng.choice(follow_ups)}",
                        "rejected": f"{a} {rng.choice(closings)}",
                    }
                )
        return rows

    write("rlhf-prefs.jsonl", pairs(train_qa, FOLLOW_UPS[:4], CLOSINGS[:4]))
    write("rlhf-prefs.eval.jsonl", pairs(eval_qa, FOLLOW_UPS, CLOSINGS))
    write("rlhf-prompts.jsonl", [{"prompt": q, "metadata": {}} for q, _ in train_qa])
    write("rlhf-prompts.eval.jsonl", [{"prompt": q, "metadata": {}} for q, _ in eval_qa])
    own = {
        "criteria": [
            {"name": "correct", "description": "The answer is factually correct.", "weight": 3},
            {"name": "brief", "description": "The answer is one or two sentences."},
        ],
        "scale": [0, 2],
    }
    rubric_rows = [{"prompt": q, "metadata": {}} for q, _ in train_qa[:12]]
    rubric_rows[3]["metadata"] = {"rubric": own}  # a row may bring its own rubric
    write("rubric-chat.jsonl", rubric_rows)
    write("rubric-chat.eval.jsonl", [{"prompt": q, "metadata": {}} for q, _ in eval_qa[:4]])


if __name__ == "__main__":
    main()
