"""Where values read from a study become display text: the one place for the HTML report
and for the terminal.

A shared study is input: anyone who can write a trial writes its record, so a stored string
may hold markup or terminal escape sequences. Every surface passes stored values (and text
built from them) through `html_text` or `terminal_text`/`terminal_cell` before showing them.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

#: written as character references in HTML: markup, quotes, and the `=` and `:` that would
#: start an event handler (`onerror=`) or a script URL (`javascript:`) if a value ever landed
#: in an attribute. Numeric references for quotes: plotly decodes those, not `&quot;`.
_HTML = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    '"': "&#34;",
    "'": "&#39;",
    "=": "&#61;",
    ":": "&#58;",
}


def terminal_text(value: Any) -> str:
    """`value` as text a terminal only prints: every character that is not printable (C0
    controls including newline and tab, DEL, C1, bidi overrides, line separators) is shown as
    its escape (`\\x1b`, `\\n`, `\\u202e`), so no escape sequence reaches the terminal and the
    text stays on one line."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def terminal_cell(value: Any, style: str = "") -> Text:
    """A rich Text of `terminal_text(value)`: rich markup in it (`[link=...]`) stays literal,
    which a plain string in a table cell or column header would not."""
    return Text(terminal_text(value), style=style)


def html_text(value: Any) -> str:
    """`value` as HTML text (the report's cells, and plotly's labels and hover text, which
    plotly reads as HTML too): characters that are not printable shown as in the terminal,
    then markup escaped."""
    return "".join(_HTML.get(ch, ch) for ch in terminal_text(value))
