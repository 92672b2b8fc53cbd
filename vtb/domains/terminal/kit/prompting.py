"""How terminal tasks become model text, and model text becomes shell actions.

Shared by the harnesses and the data tools, so a training row teaches the model exactly the
format a harness prompts it with:

    task: Count the lines of /app/server.log that contain ERROR and write the number to /app/count.txt
    $ grep -c 'ERROR' /app/server.log > /app/count.txt

The model writes one command line after `$ `; the harness sends it as a `shell` action.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

PROMPT = "task: {instruction}\n$ "


def prompt(instruction: str) -> str:
    return PROMPT.format(instruction=" ".join(instruction.split()))


def sft_row(instruction: str, command: str) -> dict:
    return {"prompt": prompt(instruction), "completion": command.strip() + "\n"}


def command_of(text: str) -> str:
    """The first line of a completion, stripped: what the harness runs."""
    return text.strip().split("\n", 1)[0].strip()


PATH = re.compile(r"/app(?:/[A-Za-z0-9_.-]*[A-Za-z0-9_])*")


def ground_paths(command: str, instruction: str) -> str:
    """Snap each /app path of the command that the instruction never names to the closest one it does.

    A small model copies most of a path and gets a name wrong (/app/names.txt for /app/paths.txt);
    a path the instruction does not mention is almost always such a slip. A path the model made
    up that is close to none of the instruction's (similarity < 0.5) is left alone.
    """
    named = list(dict.fromkeys(PATH.findall(instruction)))

    def snap(m: re.Match) -> str:
        path = m.group(0)
        if path in named or not named or any(n.startswith(path + "/") for n in named):
            return path
        best = max(named, key=lambda n: SequenceMatcher(None, path, n).ratio())
        return best if SequenceMatcher(None, path, best).ratio() >= 0.5 else path

    return PATH.sub(snap, command)
