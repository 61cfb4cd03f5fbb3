"""The report page's stylesheet, inlined into the HTML file (no network needed to view it)."""

CSS = r"""
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; font: 13px/1.35 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: #1d2433; background: #f4f5f7; }
#app { display: grid; height: 100vh; grid-template-columns: minmax(0, 1fr) 420px;
  grid-template-rows: auto minmax(0, 1fr) 170px; }
header { grid-column: 1 / 3; display: flex; gap: 14px; align-items: center; padding: 7px 12px;
  background: #1d2433; color: #fff; }
header h1 { font-size: 15px; margin: 0; font-weight: 600; }
header .stat { opacity: .85; }
header .tools { margin-left: auto; display: flex; gap: 6px; align-items: center; }
button, select, input { font: inherit; border: 1px solid #b8bfcc; border-radius: 4px; background: #fff;
  padding: 2px 8px; color: #1d2433; }
button:hover { background: #e8ecf3; }
#graph { position: relative; overflow: hidden; background: #fff; border-right: 1px solid #d5d9e0;
  cursor: grab; touch-action: none; }
#graph.panning { cursor: grabbing; }
#graph svg { width: 100%; height: 100%; display: block; }
#legend { position: absolute; left: 8px; bottom: 8px; background: rgba(255,255,255,.92); padding: 5px 8px;
  border: 1px solid #d5d9e0; border-radius: 4px; font-size: 11px; pointer-events: none; }
#legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 10px; }
#legend i { display: inline-block; width: 14px; height: 10px; border: 1px solid #555; }
#chart { grid-column: 1; background: #fff; border-top: 1px solid #d5d9e0; padding: 4px 8px; overflow: hidden; }
#chart h3, #side h3 { margin: 2px 0 4px; font-size: 12px; text-transform: uppercase; letter-spacing: .04em;
  color: #5a6478; }
#side { grid-row: 2 / 4; grid-column: 2; overflow-y: auto; padding: 8px 12px; }
section { background: #fff; border: 1px solid #d5d9e0; border-radius: 6px; padding: 8px 10px; margin-bottom: 10px; }
table { border-collapse: collapse; width: 100%; }
td, th { padding: 2px 4px; text-align: left; vertical-align: top; }
th { color: #5a6478; font-weight: 500; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.hbar { height: 9px; background: #6b8fd6; border-radius: 2px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; vertical-align: -1px;
  border: 1px solid rgba(0,0,0,.35); }
.muted { color: #6b7488; }
.verdict-costlier { color: #8a4b00; } .verdict-rejected { color: #b3261e; } .verdict-tie { color: #2b6a2b; }
.verdict-needs-more { color: #6a4a9c; }
.node rect { stroke: #3d4657; stroke-width: 1; }
.node text { font: 11px ui-monospace, "DejaVu Sans Mono", monospace; fill: #1d2433; pointer-events: none; }
.node.prim { cursor: pointer; }
.node.input rect { fill: #fff; stroke: #1d2433; stroke-width: 2; }
.node.output rect { fill: #1d2433; } .node.output text { fill: #fff; }
.node.weight rect { fill: #8c93a3; stroke: #555c6b; }
.node.recomp rect { stroke: #d0021b; stroke-width: 2.5; stroke-dasharray: 4 2; }
.node .badge { fill: #d0021b; font-weight: 700; font-size: 10px; }
.node.sel rect { stroke: #000; stroke-width: 2.5; }
.dim .node.prim:not(.sel), .dim .node.weight:not(.sel) { opacity: .22; }
.dim .edge:not(.sel) { opacity: .15; }
.edge { fill: none; stroke: #8f97a8; stroke-width: 1.2; }
.edge.sel { stroke: #1d2433; stroke-width: 2; }
svg.far .node text { display: none; }
#bars rect { cursor: pointer; }
#bars rect.sel { stroke: #000; stroke-width: 1.5; }
.kv td:first-child { color: #5a6478; white-space: nowrap; width: 40%; }
.rival { border-top: 1px solid #eceef2; padding: 4px 0; overflow-wrap: anywhere; }
"""
