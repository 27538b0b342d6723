"""`sweeper models ...`: make the models sweeper can serve without a model hub."""

from __future__ import annotations

from pathlib import Path

import typer

from sweeper.models.random_gguf import DTYPES, VOCAB, write_random_gguf

models_app = typer.Typer(no_args_is_help=True, help="Models for real engines without a model hub.")


@models_app.command("make-gguf")
def make_gguf(
    layers: int = typer.Option(..., "--layers", min=1, help="Transformer blocks."),
    width: int = typer.Option(..., "--width", min=64, help="Embedding width (a multiple of 64)."),
    out: Path = typer.Option(..., "--out", help="The .gguf file to write."),
    seed: int = typer.Option(0, "--seed", help="Weights seed: same seed, same bytes."),
    dtype: str = typer.Option("f16", "--dtype", help=f"Weight type: {', '.join(DTYPES)}."),
    vocab: int = typer.Option(VOCAB, "--vocab", min=300,
                              help="Tokenizer size; a sweep's prompt ids need the default 32000."),
) -> None:
    """A llama-architecture GGUF with random weights and a real tokenizer, for llama-server."""
    try:
        shape = write_random_gguf(out, layers, width, seed=seed, dtype=dtype, vocab=vocab)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    size_mb = out.stat().st_size / 1e6
    typer.echo(f"wrote {out}: {shape.layers} layers x {shape.width}, {shape.parameters / 1e6:.1f}M "
               f"parameters, {dtype}, {size_mb:.1f} MB")
