"""The borderline review page: a self-contained HTML file, pairs side by side, differences marked."""

from __future__ import annotations

import difflib
import html
from pathlib import Path

from stream_dedupe.quality.tune import CandidatePair, TuneResult

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.3rem; } .meta { color: #555; }
.pair { border: 1px solid #ccc; border-radius: 6px; margin: 1.2rem 0; padding: .8rem; }
.pair h2 { font-size: 1rem; margin: 0 0 .5rem; }
.verdict-dup { color: #0a7d32; } .verdict-not { color: #b35c00; }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: .8rem; }
.doc { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: .8rem;
       background: #fafafa; padding: .5rem; max-height: 24rem; overflow: auto; }
.removed { background: #ffd7d5; text-decoration: line-through; }
.added { background: #ccf2d1; }
"""


def _marked(tokens_a: list[str], tokens_b: list[str]) -> tuple[str, str]:
    """Both token lists as HTML, with what only one side has wrapped in a highlight span."""
    left: list[str] = []
    right: list[str] = []
    matcher = difflib.SequenceMatcher(a=tokens_a, b=tokens_b, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        a_text = html.escape(" ".join(tokens_a[a0:a1]))
        b_text = html.escape(" ".join(tokens_b[b0:b1]))
        if op == "equal":
            left.append(a_text)
            right.append(b_text)
            continue
        if a_text:
            left.append(f'<span class="removed">{a_text}</span>')
        if b_text:
            right.append(f'<span class="added">{b_text}</span>')
    return " ".join(left), " ".join(right)


def _pair_html(result: TuneResult, pair: CandidatePair, number: int) -> str:
    t = result.params.threshold
    verdict = "duplicate" if pair.exact >= t else "not a duplicate"
    css = "verdict-dup" if pair.exact >= t else "verdict-not"
    estimate_verdict = "duplicate" if pair.estimated >= t else "not a duplicate"
    left, right = _marked(result.texts[pair.a].split(), result.texts[pair.b].split())
    a_id, b_id = html.escape(result.ids[pair.a]), html.escape(result.ids[pair.b])
    return f"""<section class="pair" data-exact="{pair.exact:.4f}" data-estimated="{pair.estimated:.4f}">
<h2>#{number}: {a_id} &harr; {b_id}</h2>
<p>exact Jaccard <b>{pair.exact:.4f}</b> (<span class="{css}">{verdict}</span>),
estimated <b>{pair.estimated:.4f}</b> ({estimate_verdict} with --verify estimate)</p>
<div class="cols"><div class="doc" data-id="{a_id}">{left}</div><div class="doc" data-id="{b_id}">{right}</div></div>
</section>"""


def write_review_page(result: TuneResult, path: Path, count: int) -> int:
    """Write the page with the ``count`` pairs nearest the threshold; returns how many it shows."""
    pairs = result.borderline(count)
    p = result.params
    body = "\n".join(_pair_html(result, pair, i + 1) for i, pair in enumerate(pairs))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>stream-dedupe: borderline pairs</title>
<style>{_STYLE}</style></head><body>
<h1>Borderline pairs at threshold {p.threshold}</h1>
<p class="meta">{len(pairs)} of {len(result.pairs):,} LSH candidate pairs, nearest the threshold first;
shingles {p.shingle}, {p.num_perm} permutations, {p.bands} bands x {p.rows} rows.
Words only in the left document are <span class="removed">struck</span>, words only in the right one are
<span class="added">marked</span>.</p>
{body or '<p id="empty">No candidate pairs.</p>'}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
    return len(pairs)
