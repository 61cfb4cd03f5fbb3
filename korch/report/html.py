"""`korch report`: one self-contained HTML file (data, script and styles inline) showing a saved plan."""

from __future__ import annotations

import html
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from korch.io import atomic_write
from korch.profile.database import ProfileDB
from korch.report.alternatives import ProfileIndex
from korch.report.data import build_payload
from korch.report.facts import PlanFacts
from korch.report.layout import layout_graph
from korch.report.page_css import CSS
from korch.report.page_js import JS

log = logging.getLogger("korch.report")

BODY = """<div id="app">
<header><h1>korch plan: {title}</h1><span class="stat">{stats}</span>
<div class="tools"><input id="find" placeholder="find value, ONNX node, k12" size="24">
<select id="colorby"><option value="kernel">colour by kernel</option><option value="backend">colour by backend</option>
</select><button id="zin" title="zoom in">+</button><button id="zout" title="zoom out">&minus;</button>
<button id="top" title="fit the width, show the top">top</button><button id="fit" title="whole graph">fit</button></div>
</header>
<div id="graph"><svg id="svg"></svg><div id="legend"></div></div>
<div id="chart"><h3>Kernel times in execution order (click a bar)</h3><div id="bars" style="height:132px"></div></div>
<aside id="side">
<section><h3>Selected kernel</h3><div id="details"></div></section>
<section><h3>Summary</h3><div id="summary"></div></section>
<section><h3>Time per backend</h3><div id="per-backend"></div></section>
<section><h3>Time per primitive class</h3><div id="per-class"></div></section>
</aside></div>"""


def render_html(payload: dict[str, Any]) -> str:
    # "<" escaped inside the JSON so no value can close the script element.
    data = json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    kernels = len(payload["kernels"])
    stats = (f"{len(payload['prims'])} primitives &middot; {kernels} kernel{'' if kernels == 1 else 's'} &middot; "
             f"predicted {payload['totalMs']:.4f} ms")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<title>korch plan {html.escape(payload['title'])}</title>\n<style>{CSS}</style></head>\n<body>\n"
            + BODY.format(title=html.escape(payload["title"]), stats=stats)
            + f"\n<script id=\"data\" type=\"application/json\">{data}</script>\n<script>{JS}</script>\n"
            "</body></html>\n")


def write_report(facts: PlanFacts, db: ProfileDB | None, output: str | os.PathLike, db_note: str = "") -> Path:
    t0 = time.perf_counter()
    index = ProfileIndex(facts, db) if db is not None else None
    t1 = time.perf_counter()
    layout = layout_graph(facts.graph)
    t2 = time.perf_counter()
    if index is not None and index.notes:
        db_note = "; ".join([db_note, *index.notes])
    page = render_html(build_payload(facts, layout, index, db_note))
    atomic_write(output, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    log.info("report: alternatives %.2f s, layout %.2f s (%d boxes), page %.2f s, %d KB", t1 - t0, t2 - t1,
             len(layout.boxes), time.perf_counter() - t2, len(page) // 1024)
    return Path(output)
