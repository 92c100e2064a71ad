"""Generate the tool-agents example data: a corpus of invented facts, questions that need it, traces.

    python recipes/data/make_tool_agents.py           # (re)write the files below
    python recipes/data/make_tool_agents.py --check   # exit 1 if the committed files are stale

The corpus describes towns, people, workshops and ships that do not exist (names built from invented
syllables, facts drawn at random), so no model can answer from memory: a question is answered by
searching. Three kinds of question:

- one hop: a fact of one entity ("In what year was Velmora Looms founded?"), one search;
- two hops: a fact of an entity named in another's document ("In which town was the founder of
  Velmora Looms born?"), two searches;
- a calculation: two facts combined ("How many years passed between the founding of Tarsk and the
  founding of Velmora Looms?"), two searches and the calculator.

The held-out questions ask about entities no training question names, so a model that does well on
them has learnt to search, not the training facts. Files (deterministic: a fixed seed, no timestamps):

    tool-corpus.jsonl              the documents, {"id", "title", "text"} (the cards' corpus)
    tool-questions.jsonl           GRPO rows {"prompt", "metadata": {"answer": [...], "kind"}}
    tool-questions.eval.jsonl      held-out GRPO rows
    tool-traces.jsonl              SFT rows {"prompt", "completion": [assistant and tool messages]}
    tool-traces.eval.jsonl         held-out SFT rows

The traces are demonstrations of the search: each tool result in them is what the loop's own search
and calculator (templates/tools/, imported here) return, so SFT on them shows the model exactly the
tool outputs GRPO will show it.
"""

import argparse
import importlib.util
import json
import random
import sys
import tempfile
from pathlib import Path

SEED = 11
DATA_DIR = Path(__file__).resolve().parent
TOOLS_DIR = DATA_DIR.parents[1] / "templates" / "tools"
FILES = {
    "corpus": DATA_DIR / "tool-corpus.jsonl",
    "questions": DATA_DIR / "tool-questions.jsonl",
    "questions_eval": DATA_DIR / "tool-questions.eval.jsonl",
    "traces": DATA_DIR / "tool-traces.jsonl",
    "traces_eval": DATA_DIR / "tool-traces.eval.jsonl",
}
COUNTS = {"town": 90, "person": 150, "workshop": 110, "ship": 70}  # 420 documents
EVAL_SHARE = 0.2  # of the entities questions are asked about
KINDS = {"one_hop": 0.6, "two_hop": 0.25, "calculation": 0.15}  # the mix of questions
TRAIN_QUESTIONS = 400
EVAL_QUESTIONS = 48
TRAIN_TRACES = 240  # demonstrations, of the training questions
EVAL_TRACES = 24
SEARCH_TIMEOUT_S = 5.0

ONSETS = [
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "th",
    "v",
    "z",
]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
CODAS = ["", "", "l", "n", "r", "s", "th", "sk", "nd", "rm", "x", "lt"]
TOWN_ENDS = ["mora", "wick", "dale", "holm", "by", "stead", "ford", "mere", "gard", "vik"]
TRADES = {
    "Looms": "woven cloth",
    "Glassworks": "lenses and bottles",
    "Foundry": "bells and cast iron",
    "Clockmakers": "tower clocks",
    "Ropeworks": "ship ropes",
    "Press": "printed maps",
    "Instruments": "barometers",
    "Tannery": "saddle leather",
}
JOBS = ["glassmaker", "weaver", "surveyor", "shipwright", "clockmaker", "cartographer", "brewer", "engineer"]
SHIP_KINDS = ["river barge", "schooner", "ferry", "whaling ship", "steam packet", "survey vessel"]
REGIONS = ["Kesh", "Ombria", "Varnland", "the Tullen Coast", "Eastmarch", "Hollowfen"]


def load_tool(name: str):
    """templates/tools/<name>.py, the code the loops inline, imported by path."""
    spec = importlib.util.spec_from_file_location(f"_rtc_tool_{name}", TOOLS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Names:
    """Invented names, each used once."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def word(self, syllables: int) -> str:
        while True:
            parts = [self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(syllables)]
            word = ("".join(parts) + self.rng.choice(CODAS)).capitalize()
            if word not in self.used and 4 <= len(word) <= 10:
                self.used.add(word)
                return word

    def town(self) -> str:
        while True:
            name = self.word(1) + self.rng.choice(TOWN_ENDS)
            if name not in self.used:
                self.used.add(name)
                return name


def build_world(rng: random.Random) -> dict[str, list[dict]]:
    names = Names(rng)
    rivers = [names.word(2) for _ in range(12)]
    towns = [
        {
            "kind": "town",
            "name": names.town(),
            "founded": rng.randint(900, 1650),
            "population": rng.randrange(1200, 90000, 100),
            "river": rng.choice(rivers),
            "region": rng.choice(REGIONS),
        }
        for _ in range(COUNTS["town"])
    ]
    people = []
    for _ in range(COUNTS["person"]):
        first, last = names.word(2), names.word(2)
        people.append(
            {
                "kind": "person",
                "name": f"{first} {last}",
                "born": rng.randint(1700, 1880),
                "town": rng.choice(towns)["name"],
                "job": rng.choice(JOBS),
            }
        )
    founders = rng.sample(people, COUNTS["workshop"])
    workshops = []
    for founder in founders:
        trade = rng.choice(sorted(TRADES))
        workshops.append(
            {
                "kind": "workshop",
                "name": f"{names.word(2)} {trade}",
                "trade": trade,
                "founded": founder["born"] + rng.randint(19, 55),
                "founder": founder["name"],
                "town": rng.choice(towns)["name"],
            }
        )
    ships = [
        {
            "kind": "ship",
            "name": f"the {names.word(2)}",
            "type": rng.choice(SHIP_KINDS),
            "launched": rng.randint(1780, 1910),
            "captain": rng.choice(people)["name"],
            "length": rng.randint(18, 90),
            "home": rng.choice(towns)["name"],
        }
        for _ in range(COUNTS["ship"])
    ]
    return {"town": towns, "person": people, "workshop": workshops, "ship": ships}


def document(entity: dict, n: int) -> dict:
    kind = entity["kind"]
    if kind == "town":
        text = (
            f"{entity['name']} is a town on the river {entity['river']}, in {entity['region']}. "
            f"It was founded in {entity['founded']} and has {entity['population']:,} inhabitants."
        )
        title = entity["name"]
    elif kind == "person":
        article = "an" if entity["job"][0] in "aeiou" else "a"
        text = (
            f"{entity['name']} was {article} {entity['job']}, born in {entity['born']} in the town of "
            f"{entity['town']}."
        )
        title = entity["name"]
    elif kind == "workshop":
        text = (
            f"{entity['name']} makes {TRADES[entity['trade']]}. It was founded in {entity['founded']} by "
            f"{entity['founder']}, and its workshop stands in {entity['town']}."
        )
        title = entity["name"]
    else:
        title = entity["name"][4:].capitalize()
        text = (
            f"{title} is a {entity['type']} launched in {entity['launched']}, "
            f"{entity['length']} metres long. Her captain was {entity['captain']} and her home port "
            f"is {entity['home']}."
        )
        title = f"{title} ({entity['type']})"
    return {"id": f"{kind[0]}{n:03d}", "title": title, "text": text}


def number_answers(value: int) -> list[str]:
    return sorted({str(value), f"{value:,}"})


def questions_about(entity: dict, world: dict, rng: random.Random) -> list[dict]:
    """Every question this entity can be the subject of: [{"kind", "question", "answer", "plan"}], where
    `plan` is the demonstration's tool calls: ("search", query) and ("calculator", expression)."""
    by_name = {e["name"]: e for kind in world.values() for e in kind}
    name, kind = entity["name"], entity["kind"]
    out = []

    def add(kind_, question, answer, plan):
        out.append({"kind": kind_, "question": question, "answer": answer, "plan": plan})

    if kind == "town":
        add("one_hop", f"On which river is the town of {name}?", [entity["river"]], [("search", name)])
        add("one_hop", f"In what year was {name} founded?", [str(entity["founded"])], [("search", name)])
        add(
            "one_hop",
            f"How many inhabitants does {name} have?",
            number_answers(entity["population"]),
            [("search", name)],
        )
    elif kind == "person":
        add("one_hop", f"In which town was {name} born?", [entity["town"]], [("search", name)])
        add("one_hop", f"In what year was {name} born?", [str(entity["born"])], [("search", name)])
        town = by_name[entity["town"]]
        add(
            "two_hop",
            f"On which river is the town where {name} was born?",
            [town["river"]],
            [("search", name), ("search", town["name"])],
        )
    elif kind == "workshop":
        add("one_hop", f"Who founded {name}?", [entity["founder"]], [("search", name)])
        add("one_hop", f"In what year was {name} founded?", [str(entity["founded"])], [("search", name)])
        founder = by_name[entity["founder"]]
        add(
            "two_hop",
            f"In which town was the founder of {name} born?",
            [founder["town"]],
            [("search", name), ("search", founder["name"])],
        )
        years = entity["founded"] - founder["born"]
        add(
            "calculation",
            f"How old was the founder of {name} when it was founded?",
            [str(years)],
            [
                ("search", name),
                ("search", founder["name"]),
                ("calculator", f"{entity['founded']} - {founder['born']}"),
            ],
        )
        town = by_name[entity["town"]]
        gap = entity["founded"] - town["founded"]
        add(
            "calculation",
            f"How many years after the founding of {town['name']} was {name} founded?",
            [str(gap)],
            [
                ("search", name),
                ("search", town["name"]),
                ("calculator", f"{entity['founded']} - {town['founded']}"),
            ],
        )
    else:
        title = name[4:]
        add(
            "one_hop",
            f"Who was the captain of the {title}?",
            [entity["captain"]],
            [("search", f"{title} captain")],
        )
        add(
            "one_hop",
            f"In what year was the {title} launched?",
            [str(entity["launched"])],
            [("search", title)],
        )
        captain = by_name[entity["captain"]]
        add(
            "two_hop",
            f"In what year was the captain of the {title} born?",
            [str(captain["born"])],
            [("search", title), ("search", captain["name"])],
        )
    return out


def trace(item: dict, corpus, calculator) -> list[dict]:
    """The demonstration: each planned call, its real result, then the answer."""
    messages = []
    for i, (tool, argument) in enumerate(item["plan"]):
        if tool == "search":
            arguments, result = {"query": argument}, corpus.search(argument, SEARCH_TIMEOUT_S)
        else:
            arguments, result = {"expression": argument}, calculator.calculate(argument)
        call_id = f"call_{i}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps(arguments)},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": tool, "content": result})
    messages.append({"role": "assistant", "content": item["answer"][0]})
    return messages


def found(item: dict, corpus, doc_of: dict) -> bool:
    """Whether every search of the plan shows the document it is meant to find."""
    for (tool, argument), target in zip(item["plan"], item["targets"], strict=False):
        if tool == "search" and f"[{doc_of[target]}]" not in corpus.search(argument, SEARCH_TIMEOUT_S):
            return False
    return True


def generate() -> dict[Path, str]:
    rng = random.Random(SEED)
    world = build_world(rng)
    entities = [e for kind in ("town", "person", "workshop", "ship") for e in world[kind]]
    rng.shuffle(entities)
    docs = [document(entity, n) for n, entity in enumerate(entities)]
    doc_of = {entity["name"]: doc["id"] for entity, doc in zip(entities, docs, strict=True)}
    files = {FILES["corpus"]: "".join(json.dumps(doc) + "\n" for doc in docs)}

    corpus_tool, calculator = load_tool("corpus"), load_tool("calculator")
    with tempfile.TemporaryDirectory() as folder:  # the loops' own search, over the corpus being written
        path = Path(folder) / "corpus.jsonl"
        path.write_text(files[FILES["corpus"]], encoding="utf-8")
        corpus = corpus_tool.Corpus(str(path))

    held_out = set(rng.sample(range(len(entities)), int(len(entities) * EVAL_SHARE)))
    split = {"train": [], "eval": []}
    for index, entity in enumerate(entities):
        for item in questions_about(entity, world, rng):
            hops = [entity["name"]] + [argument for tool, argument in item["plan"][1:] if tool == "search"]
            item["targets"] = hops
            if found(item, corpus, doc_of):
                split["eval" if index in held_out else "train"].append(item)
    rows = {}
    for name, items in split.items():
        rng.shuffle(items)
        by_kind = {kind: [i for i in items if i["kind"] == kind] for kind in KINDS}
        total = TRAIN_QUESTIONS if name == "train" else EVAL_QUESTIONS
        chosen = [i for kind, share in KINDS.items() for i in by_kind[kind][: int(total * share)]]
        rng.shuffle(chosen)
        rows[name] = chosen
    files[FILES["questions"]] = jsonl(question_row(i) for i in rows["train"])
    files[FILES["questions_eval"]] = jsonl(question_row(i) for i in rows["eval"])
    files[FILES["traces"]] = jsonl(trace_row(i, corpus, calculator) for i in rows["train"][:TRAIN_TRACES])
    files[FILES["traces_eval"]] = jsonl(trace_row(i, corpus, calculator) for i in rows["eval"][:EVAL_TRACES])
    return files


def question_row(item: dict) -> dict:
    return {"prompt": item["question"], "metadata": {"answer": item["answer"], "kind": item["kind"]}}


def trace_row(item: dict, corpus, calculator) -> dict:
    return {"prompt": item["question"], "completion": trace(item, corpus, calculator)}


def jsonl(rows) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files are stale")
    args = parser.parse_args(argv)
    files = generate()
    stale = [
        path for path, text in files.items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    if args.check:
        for path in stale:
            print(f"stale: {path.name}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.name}: {text.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
