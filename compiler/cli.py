"""The `rtc` command line: a thin layer over the compiler library.

Exit codes, decided here and only here: 0 ok, 1 invalid card / stale output / failed run or export,
2 usage error (bad option, missing file). Errors go to stderr as `Error: ...`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__
from .errors import CardError, RtcError, UsageError


class RtcGroup(click.Group):
    """Maps every `RtcError` to its exit code with a one-line message, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except CardError as exc:
            for problem in exc.problems:
                click.echo(str(problem), err=True)
            n = len(exc.problems)
            click.echo(f"{n} problem{'s' if n != 1 else ''} found", err=True)
            ctx.exit(exc.exit_code)
        except RtcError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=RtcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rtc")
def cli() -> None:
    """Compile YAML recipe cards into standalone Tinker training loops.

    \b
    Quick start:
      rtc new --signal environment --method grpo --task math --model Qwen/Qwen3-8B -o my.yaml
      rtc compile my.yaml -o loop.py
      rtc run loop.py --data train.jsonl        # trains locally through `rtc serve`
    """


@cli.command("compile")
@click.argument("card", type=click.Path(dir_okay=False))
@click.option("-o", "--output", default="-", show_default=True, help="Output file; '-' prints the loop.")
def compile_cmd(card: str, output: str) -> None:
    """Compile CARD into one standalone training loop.

    \b
    Example:
      rtc compile recipes/sdft-tool-agents-nemotron.yaml -o loop.py
    """
    from .build import compile_card, write_atomic

    name = Path(output).name if output != "-" else None
    if name and Path(output).resolve() == Path(card).resolve():
        raise UsageError(f"-o {output} is the card itself; choose another output file")
    resolved, source = compile_card(card, output_name=name)
    if output == "-":
        click.echo(source, nl=False)
    else:
        write_atomic(output, source)
        click.echo(f"wrote {output} ({resolved.method.name} on {resolved.model.name})", err=True)


@cli.command("validate")
@click.argument("cards", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate_cmd(cards: tuple[str, ...]) -> None:
    """Check CARDS and report every problem as file:line:col: field: message.

    \b
    Example:
      rtc validate recipes/*.yaml
    """
    from .build import load_resolved

    problems = []
    for card in cards:
        try:
            load_resolved(card)
            click.echo(f"{card}: ok")
        except CardError as exc:
            problems.extend(exc.problems)
    if problems:
        raise CardError(problems)


@cli.command("build")
@click.option("--check", is_flag=True, help="Change nothing; exit 1 and name the stale files if any.")
def build_cmd(check: bool) -> None:
    """Compile every card in recipes/ into generated/<name>.py.

    Run it from the project root. It also refreshes compiler/schema/card.schema.json.

    \b
    Example:
      rtc build && git diff --stat generated/
    """
    from .build import build_all

    result = build_all(Path("."), check=check)
    if result.errors:
        raise RtcError("\n".join(result.errors) + "\nnothing was written")
    if check:
        if result.stale:
            for path in result.stale:
                click.echo(f"stale: {path}", err=True)
            raise RtcError("generated files are out of date; run `rtc build`")
        click.echo("generated/ is up to date")
        return
    for path in result.written:
        click.echo(f"wrote {path}" if path.exists() else f"removed {path}")
    if not result.written:
        click.echo("generated/ is up to date")


@cli.command("list")
@click.argument("what", type=click.Choice(["models", "signals", "methods", "tasks", "losses", "tools"]))
def list_cmd(what: str) -> None:
    """Print the catalog: models, signals, methods, tasks, losses or tools.

    \b
    Example:
      rtc list models
    """
    from .catalog import load_catalog

    catalog = load_catalog()
    if what == "models":
        rows = [
            (m.name, m.size, f"ctx {m.context}" if m.context else "ctx ?", f"thinking {m.thinking}", m.chat)
            for m in catalog.models.values()
        ]
    elif what == "signals":
        rows = [(s.name, s.summary) for s in catalog.signals.values()]
    elif what == "methods":
        rows = [
            (m.name, f"signal {m.signal}", "losses " + ",".join(m.losses), m.summary)
            for m in catalog.methods.values()
        ]
    elif what == "tasks":
        rows = [(t.name, "signals " + ",".join(t.signals), t.summary) for t in catalog.tasks.values()]
    elif what == "tools":
        rows = [
            (
                t.name,
                "(" + ", ".join(t.parameters["properties"]) + ")",
                f"timeout {t.timeout:g}s",
                t.description,
            )
            for t in catalog.tools.values()
        ]
    else:
        rows = [
            (loss.name, ", ".join(f"{o.name}={o.default:g}" for o in loss.config) or "-", loss.summary)
            for loss in catalog.losses.values()
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        )


@cli.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of a card (also shipped as compiler/schema/card.schema.json).

    \b
    Example (an editor with yaml-language-server):
      rtc schema > card.schema.json
      # yaml-language-server: $schema=./card.schema.json
    """
    from .schema import schema_text

    click.echo(schema_text(), nl=False)


@cli.command("explain")
@click.argument("card", type=click.Path(dir_okay=False))
@click.option("--no-cost", is_flag=True, help="Skip the cost estimate (it counts the data's tokens).")
def explain_cmd(card: str, no_cost: bool) -> None:
    """Print the fully resolved CARD and where each value came from, then the cost of the whole run
    on the card's data (the estimate of the loop's --dry-run).

    \b
    Example:
      rtc explain recipes/grpo-math-qwen3.yaml
    """
    from .build import load_resolved
    from .explain import estimate_lines, explain_lines

    resolved = load_resolved(card)
    for line in explain_lines(resolved):
        click.echo(line)
    if not no_cost:
        click.echo("")
        for line in estimate_lines(resolved):
            click.echo(line)


@cli.command("new")
@click.option("--signal", required=True, help="environment, preferences or demonstrations")
@click.option("--method", required=True, help="grpo, dpo, sft or sdft (see `rtc list methods`)")
@click.option("--task", required=True, help="see `rtc list tasks`")
@click.option("--model", required=True, help="see `rtc list models`")
@click.option("--name", help="card name (a slug); default from method, task and model")
@click.option("-o", "--output", default="-", show_default=True, help="Card file to write; '-' prints it.")
def new_cmd(signal: str, method: str, task: str, model: str, name: str | None, output: str) -> None:
    """Write a commented starter card.

    \b
    Example:
      rtc new --signal environment --method grpo --task math --model Qwen/Qwen3-8B -o my-card.yaml
    """
    from .build import write_atomic
    from .starter import starter_card

    text = starter_card(signal=signal, method=method, task=task, model=model, name=name)
    if output == "-":
        click.echo(text, nl=False)
        return
    if Path(output).exists():
        raise UsageError(f"{output} exists; choose another -o or remove it")
    write_atomic(output, text)
    click.echo(f"wrote {output}; next: rtc compile {output} -o loop.py", err=True)


@cli.command(
    "serve",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_cmd(args: tuple[str, ...]) -> None:
    """Run a local Tinker-compatible training server on the CPU (see `rtc serve --help`).

    \b
    Example:
      rtc serve --port 8000 --model smollm2
    """
    try:
        from rtc.server.cli import main as serve_main
    except ImportError as exc:
        raise UsageError(f"rtc serve needs the local extra: pip install -e '.[local]' ({exc})") from None
    sys.exit(serve_main(list(args)))


@cli.command(
    "run",
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "allow_interspersed_args": False,
    },
)
@click.argument("loop", type=click.Path(exists=True, dir_okay=False))
@click.argument("loop_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--model",
    "serve_model",
    default="smollm2",
    show_default=True,
    help="model for the local server: smollm2, tiny or a HF model directory",
)
@click.option("--latency-ms", default=0, show_default=True, help="delay added to each server request")
def run_cmd(loop: str, loop_args: tuple[str, ...], serve_model: str, latency_ms: int) -> None:
    """Run LOOP against a local `rtc serve` started for it, then stop the server.

    Options before LOOP are rtc's; everything after LOOP goes to the loop. The loop's exit
    status is returned.

    \b
    Example:
      rtc run --model tiny generated/sft-chat-qwen3.py --data recipes/data/sft-chat.jsonl --steps 5
    """
    from .runner import run_loop

    sys.exit(run_loop(loop, list(loop_args), model=serve_model, latency_ms=latency_ms))


@cli.command("export")
@click.argument("checkpoint")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory to write (new or empty).",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    help="rtc serve's --state-dir, where its checkpoints are (default: ~/.cache/rtc/serve-state).",
)
@click.option("--merge", is_flag=True, help="Write the base model with the LoRA merged in (transformers).")
@click.option(
    "--base", help="Base weights for --merge: a model directory, tiny or smollm2 (default: the checkpoint's)."
)
@click.option("--vllm", "strict_vllm", is_flag=True, help="Refuse (exit 1) an adapter vLLM would not load.")
def export_cmd(
    checkpoint: str, output: Path, state_dir: Path | None, merge: bool, base: str | None, strict_vllm: bool
) -> None:
    """Write CHECKPOINT (a tinker:// path) as a PEFT LoRA adapter directory, or merged weights.

    A checkpoint of `rtc serve` is read from its state directory; any other path is downloaded
    from Tinker with TINKER_API_KEY (state checkpoints, tinker://RUN/weights/NAME: the paths
    loops list in checkpoints.jsonl). Nothing is written unless the export succeeds.

    \b
    Example:
      rtc export tinker://rtc-3f2a_train_0/weights/sft-step-000012 -o adapter/
      rtc export tinker://rtc-3f2a_train_0/weights/sft-step-000012 --merge -o merged/
    """
    try:
        from .export import export_checkpoint
    except ImportError as exc:  # pragma: no cover - the compiler-only install
        raise UsageError(f"rtc export needs the local extra: pip install -e '.[local]' ({exc})") from None

    result = export_checkpoint(
        checkpoint, output, state_dir=state_dir, merge=merge, base=base, strict_vllm=strict_vllm
    )
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {result.output}: {result.what}", err=True)
    for note in result.notes:
        click.echo(f"  {note}", err=True)


@cli.command("plot")
@click.argument("metrics", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", default="curves.png", show_default=True, help="PNG file to write.")
def plot_cmd(metrics: str, output: str) -> None:
    """Draw the curves of a metrics JSONL: one panel per metric, train and eval apart.

    \b
    Example:
      rtc plot runs/sft-chat-qwen3/metrics.jsonl -o curves.png
    """
    from .plot import plot_metrics

    panels = plot_metrics(metrics, output)
    click.echo(f"wrote {output} ({', '.join(panels)})")


def main() -> None:
    cli(prog_name="rtc")
