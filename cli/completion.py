"""`gpu-portal completion bash|zsh|fish`: the shell's completion script, from click's own
shell completion (commands, options and their choices, as the parser has them).

    eval "$(gpu-portal completion bash)"     # in ~/.bashrc (bash 4.4 or later)
    eval "$(gpu-portal completion zsh)"      # in ~/.zshrc
    gpu-portal completion fish > ~/.config/fish/completions/gpu-portal.fish

The script calls `gpu-portal` again with _GPU_PORTAL_COMPLETE set; click answers with the
completions of the words typed so far and calls no API."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

PROG = "gpu-portal"
COMPLETE_VAR = "_GPU_PORTAL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def completion_script(root: click.Command, shell: str) -> str:
    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - click knows every shell of SHELLS
        raise click.UsageError(f"no completion for {shell}")
    return cls(root, {}, PROG, COMPLETE_VAR).source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx, shell):
    """Print the shell's completion script: eval "$(gpu-portal completion bash)"."""
    click.echo(completion_script(ctx.find_root().command, shell))
