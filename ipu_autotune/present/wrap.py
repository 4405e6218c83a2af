"""Text that fits the terminal's width without cutting a word, a number or a path.

rich wraps at spaces but folds a word longer than the width wherever the width ends (a long
knob list `amp0.05/0.05/...` became "0.05/0." and "05"), and a table column cut with
an ellipsis ends mid-word. Here a line breaks at spaces, a word longer than the line only
after one of its list separators (`,` `/`), a command line with a shell continuation, and a
cell shows whole words with `…` for the rest (trial_line.fit_words).
"""

from __future__ import annotations

import shlex

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from .display import terminal_text
from .trial_line import fit_words

_LIST_SEPARATORS = ",/"


def prose_lines(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` columns, broken at spaces; a word longer than a line
    is broken after one of its list separators (only where it has none, at the width)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        while word:
            room = width - len(line) - (1 if line else 0)
            if len(word) <= room:
                line, word = f"{line} {word}" if line else word, ""
                continue
            cut = (
                max(word.rfind(s, 0, room) for s in _LIST_SEPARATORS)
                if len(word) > width and room > 0
                else -1
            )
            if cut < 0 and not line:  # one item longer than a line: cut where rich would
                cut = width - 1
            if cut >= 0:  # as much of the long list as fits, the rest on the next line
                line = f"{line} {word[: cut + 1]}" if line else word[: cut + 1]
                word = word[cut + 1 :]
            lines.append(line)
            line = ""
    return [*lines, line] if line or not lines else lines


class Prose:
    """A paragraph wrapped by `prose_lines` at the width it is given (as terminal text)."""

    def __init__(self, text: str, style: str = ""):
        self.text, self.style = terminal_text(text), style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in prose_lines(self.text, options.max_width):
            yield Text(line, style=self.style, no_wrap=True, overflow="ignore")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max((len(w) for w in self.text.split()), default=0)
        return Measurement(min(longest, options.max_width), min(len(self.text), options.max_width))


class WholeWords:
    """A table cell cut to its column's width at a space, `…` for the knobs left out."""

    def __init__(self, text: str, style: str = ""):
        self.text, self.style = terminal_text(text), style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(
            fit_words(self.text, options.max_width),
            style=self.style,
            no_wrap=True,
            overflow="crop",
        )

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(len(self.text), 1), len(self.text))


def fit_text(text: Text, width: int) -> Text:
    """A styled line cut like `fit_words`: whole words, then `…`."""
    fitted = fit_words(text.plain, width)
    if fitted == text.plain:
        return text
    mark = " …" if fitted.endswith(" …") else "…"
    cut = text[: len(fitted) - len(mark)]
    cut.append(mark)
    return cut


def command_lines(command: str, width: int, head: str = "") -> str:
    """A shell command after `head`, on lines of at most `width` columns broken between its
    words with ` \\` (a shell reads them as one line, so it pastes whole), continuation lines
    indented under it; a word longer than a line (a path) stays whole."""
    indent = " " * (len(head) + (2 if not head.strip() else 0) if len(head) < width // 2 else 4)
    lines, line = [], head
    for word in (shlex.quote(w) for w in shlex.split(command)):
        if line.strip() and len(line) + 1 + len(word) > width - 2:  # room for the " \\"
            lines.append(line + " \\")
            line = indent + word
        else:
            line += ("" if not line or line.endswith(" ") else " ") + word
    lines.append(line)
    return "\n".join(lines)
