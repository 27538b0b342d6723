"""The README's and docs/'s parts the tests read: their fenced blocks, sections, the `sweeper ...`
command lines they show (tests/unit/cli/test_readme_claims.py checks them against the app, tests/e2e/
test_readme_walkthrough.py runs the walkthrough's)."""

from __future__ import annotations

import re

from tests.support.paths import ROOT


def readme() -> str:
    return (ROOT / "README.md").read_text()


def docs() -> dict[str, str]:
    """README.md and every docs/*.md, by path: the user's documentation, held to the same claims."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return {str(path.relative_to(ROOT)): path.read_text() for path in files}


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", markdown, flags=re.S | re.M)


def section(markdown: str, heading: str) -> str:
    """From `heading` (a line of the text) to the next heading of its level or above (outside code blocks)."""
    start = markdown.index(f"\n{heading}\n")
    level = len(heading) - len(heading.lstrip("#"))
    fence, offset = False, start + len(heading) + 2
    for line in markdown[offset:].splitlines(keepends=True):
        fence ^= line.startswith("```")
        if not fence and re.match(rf"#{{1,{level}}} ", line):
            return markdown[start:offset]
        offset += len(line)
    return markdown[start:]


def block_commands(markdown: str, languages: tuple[str, ...] = ("bash", "")) -> list[str]:
    """The `sweeper ...` lines of the code blocks in `languages`: continuations joined, comments cut,
    spaces collapsed."""
    found = []
    for language, body in code_blocks(markdown):
        if language in languages:
            for line in body.replace("\\\n", " ").splitlines():
                line = " ".join(re.sub(r"\s#.*", "", line).split())
                if line.startswith("sweeper "):
                    found.append(line)
    return found


def inline_commands(markdown: str) -> list[str]:
    """The `sweeper ...` spans of inline code outside the fenced blocks (spaces collapsed: a span
    may wrap onto the next line)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"`(sweeper [^`]+)`", prose)]
