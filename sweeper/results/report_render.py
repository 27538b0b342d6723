"""The report's sections as one self-contained HTML page (plots embedded as base64 PNG data URIs)
and as its Markdown twin (plots as PNG files beside it). Pure: text out."""

from __future__ import annotations

import base64
from html import escape

from sweeper.results.figures import FIG_PIXELS
from sweeper.results.report_sections import Section, Table

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
nav a { margin-right: 1em; } pre { background: #f6f6f6; padding: .8em; overflow-x: auto; }
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_paragraph(text: str) -> str:
    if "\n" in text:
        return f"<pre>{escape(text)}</pre>"
    return f"<p>{escape(text)}</p>"


def format_report_html(title: str, sections: list[Section], pngs: dict[str, bytes]) -> str:
    width, height = FIG_PIXELS
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>",
             f"<style>{CSS}</style></head><body>", f"<h1>{escape(title)}</h1>",
             "<nav>" + "".join(f"<a href=\"#{s.key}\">{escape(s.title)}</a>" for s in sections) + "</nav>"]
    for section in sections:
        parts.append(f"<section id=\"{section.key}\"><h2>{escape(section.title)}</h2>")
        parts += [_html_paragraph(p) for p in section.paragraphs if p]
        if section.figure and section.figure in pngs:
            parts.append(f"<img class=\"plot\" id=\"plot-{section.figure}\" alt=\"{escape(section.title)}\" "
                         f"width=\"{width}\" height=\"{height}\" src=\"{data_uri(pngs[section.figure])}\">")
        parts += [_html_table(t) for t in section.tables]
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    lines = ["| " + " | ".join(_md_cell(h) for h in table.headers) + " |",
             "|" + "---|" * len(table.headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def format_report_markdown(title: str, sections: list[Section], figure_paths: dict[str, str]) -> str:
    parts = [f"# {title}"]
    for section in sections:
        parts.append(f"## {section.title}")
        parts += [f"```\n{p}\n```" if "\n" in p else p for p in section.paragraphs if p]
        if section.figure and section.figure in figure_paths:
            parts.append(f"![{section.title}]({figure_paths[section.figure]})")
        parts += [_md_table(t) for t in section.tables]
    return "\n\n".join(parts) + "\n"
