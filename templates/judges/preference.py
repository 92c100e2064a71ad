"""Reward-model prompt: the conversation and one response in a single user turn, then a Yes/No verdict.

The reward model is a Yes/No classifier on the policy's own base model. Its score of a response is
the log-odds of its verdict turn,

    score(prompt, response) = log p("Yes" | question) - log p("No" | question),

each the summed logprob of the whole verdict turn in the model's chat format (its end-of-turn token
included, so a verdict is one well-defined sequence in every family). A reward-model run trains that
score with a Bradley-Terry loss, -log sigmoid(score(chosen) - score(rejected)); a GRPO run with
`reward: model` asks the same question with the same function, so training and use see the same
tokens. The response is the parsed final answer (never the reasoning). Its delimiter tags are
escaped, so a response cannot close its own block and write text that reads as the question.
Standard library only: this file is inlined into the generated training loop.
"""

RM_QUESTION = "Is the response above a good reply to the conversation? Answer Yes or No."
RM_VERDICTS = ("Yes", "No")  # the verdict turns whose log-odds is the score


def _rm_escape(text: str) -> str:
    return text.replace("</response>", "<\\/response>").replace("</conversation>", "<\\/conversation>")


def rm_messages(messages: list[dict], response: str) -> list[dict]:
    """The reward model's question about `response` to `messages`, as one user turn."""
    shown = "\n\n".join(f"{m['role'].capitalize()}: {_rm_escape(m['content'])}" for m in messages)
    content = (
        f"<conversation>\n{shown}\n</conversation>\n\n"
        f"<response>\n{_rm_escape(response)}\n</response>\n\n{RM_QUESTION}"
    )
    return [{"role": "user", "content": content}]
