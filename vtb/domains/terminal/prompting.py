"""How terminal tasks become model text, and model text becomes shell actions.

Shared by the harnesses and the data tools, so a training row teaches the model exactly the
format a harness prompts it with:

    task: Count the lines of /app/server.log that contain ERROR and write the number to /app/count.txt
    $ grep -c 'ERROR' /app/server.log > /app/count.txt

The model writes one command line after `$ `; the harness sends it as a `shell` action.
"""

from __future__ import annotations

PROMPT = "task: {instruction}\n$ "


def prompt(instruction: str) -> str:
    return PROMPT.format(instruction=" ".join(instruction.split()))


def sft_row(instruction: str, command: str) -> dict:
    return {"prompt": prompt(instruction), "completion": command.strip() + "\n"}


def command_of(text: str) -> str:
    """The first line of a completion, stripped: what the harness runs."""
    return text.strip().split("\n", 1)[0].strip()
