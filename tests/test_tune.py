"""`stream-dedupe tune`: the S-curve PNG, and the review page checked in a real headless browser."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson

from bench.synth import generate

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:  # never skip: `make test` installs it (Makefile target `tools`)
        raise FileNotFoundError("chromium is not installed: run `make tools` (Debian package chromium)")
    return path


def test_tune_writes_scurve_and_a_review_page_a_browser_renders(tmp_path: Path) -> None:
    corpus = tmp_path / "crawl.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate(400, seed=3, dup_fraction=0.4)))
    out = tmp_path / "tune"
    result = subprocess.run(
        [sys.executable, "-m", "stream_dedupe", "tune", str(corpus), "--out", str(out), "--pairs", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    summary = " ".join(result.stderr.split())  # the console may wrap it
    assert f"wrote {out / 'lsh-scurve.png'} and {out / 'borderline.html'} (12 borderline pairs)" in summary
    png = (out / "lsh-scurve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    page = out / "borderline.html"
    dom = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "Borderline pairs at threshold 0.8" in dom
    assert dom.count('<section class="pair"') == 12
    assert '<span class="removed">' in dom and '<span class="added">' in dom
    exact = [float(part.split('"')[0]) for part in dom.split('data-exact="')[1:]]
    distances = [abs(x - 0.8) for x in exact]
    assert distances == sorted(distances)  # nearest the threshold first
    shot = tmp_path / "page.png"
    subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile2'}",
            f"--screenshot={shot}",
            "--window-size=1200,900",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000


def test_tune_takes_the_layout_dedupe_takes(tmp_path: Path) -> None:
    """``--bands/--rows`` pin the layout whose S-curve is drawn, as they pin dedupe's; the default is chosen."""
    corpus = tmp_path / "crawl.jsonl"
    corpus.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate(120, seed=5, dup_fraction=0.4)))
    tune = [sys.executable, "-m", "stream_dedupe", "tune", str(corpus), "--pairs", "3"]
    pinned = subprocess.run([*tune, "--out", str(tmp_path / "a"), "--bands", "16", "--rows", "8"], **_RUN)
    assert pinned.returncode == 0, pinned.stderr
    assert "(16 bands x 8 rows)" in pinned.stderr
    chosen = subprocess.run([*tune, "--out", str(tmp_path / "b")], **_RUN)
    assert chosen.returncode == 0 and "bands x" in chosen.stderr and "(16 bands x 8 rows)" not in chosen.stderr
    half = subprocess.run([*tune, "--out", str(tmp_path / "c"), "--bands", "16"], **_RUN)
    assert half.returncode == 2 and "give both bands and rows" in half.stderr


_RUN: dict = {"capture_output": True, "text": True, "timeout": 300}
