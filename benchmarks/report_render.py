"""The HTML report's first render for 1,024 ranks x 200 collectives, in headless Chromium.

In one run, on a simulated 1,024-rank NCCL fleet with a skipped collective:

1. ``fr-otel analyze --format html`` writes the report (timed: analysis plus grid).
2. Headless Chromium (Debian's ``chromium``, driven by Playwright) opens it from disk,
   ``--loads`` times, each in a fresh tab: the first render is the time from navigation
   start to the end of the first grid draw (the page's own ``performance.now()``, which
   includes parsing the page and its embedded data), and the wall time Playwright saw.
   Also: one redraw of the visible grid, which is what every scroll step costs.
3. The peer, in the same browser and the same page: the same grid as a plain HTML table
   (one ``<td>`` per cell, what a page without canvas would hold), built from the same
   embedded data and timed until the browser has laid it out and painted it.
   Torch's own collective visualizer needs a React build and a preprocessing step, so it
   is not run here.

Two layouts: ``--tp 1 --pp 1`` (one data-parallel group: its view is exactly 1,024 ranks x
200 columns) and the simulator's default 3D layout (whose all-groups view has 4,096 rows).

Goal: the 1,024-rank page renders in under 2 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fr_otel.sim import FleetSpec, simulate, write_fleet

GOAL_S = 2.0

_DOM_TABLE = """
async (viewId) => {
  const t0 = performance.now();
  const data = JSON.parse(document.getElementById("fr-data").textContent);
  const G = data.grid;
  const desc = viewId.startsWith("group:") ? viewId.slice(6) : null;
  const rowIds = [], colIds = [];
  for (let r = 0; r < G.rows.rank.length; r++)
    if (!desc || G.groups[G.rows.group[r]].desc === desc) rowIds.push(r);
  for (let c = 0; c < G.columns.desc.length; c++)
    if (!desc || G.columns.desc[c] === desc) colIds.push(c);
  const rowPos = new Map(rowIds.map((r, i) => [r, i]));
  const colPos = new Map(colIds.map((c, i) => [c, i]));
  const table = document.createElement("table");
  table.style.borderCollapse = "collapse";
  const tds = [];
  for (const r of rowIds) {
    const tr = table.insertRow();
    tr.insertCell().textContent = "rank " + G.rows.rank[r];
    const row = [];
    for (let k = 0; k < colIds.length; k++) {
      const td = tr.insertCell();
      td.style.cssText = "width:12px;height:12px;padding:0;border:1px solid #fff";
      row.push(td);
    }
    tds.push(row);
  }
  const cells = G.cells;
  for (let i = 0; i < cells.row.length; i++) {
    const r = rowPos.get(cells.row[i]), c = colPos.get(cells.col[i]);
    if (r === undefined || c === undefined) continue;
    const op = (G.signatures[cells.sig[i]] || {}).op || "?";
    let h = 0;
    for (let k = 0; k < op.length; k++) h = (h * 31 + op.charCodeAt(k)) % 360;
    tds[r][c].style.background = `hsl(${h}, 60%, 55%)`;
    tds[r][c].title = op;
  }
  document.body.prepend(table);
  table.getBoundingClientRect();
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  return {ms: performance.now() - t0, nodes: table.getElementsByTagName("td").length};
}
"""


def _write_report(root: Path, name: str, spec: FleetSpec) -> tuple[Path, float, float]:
    dumps = root / f"{name}-dumps"
    write_fleet(simulate(spec), dumps)
    archive = root / f"{name}-archive"
    subprocess.run(
        [sys.executable, "-m", "fr_otel", "import", str(dumps), "--archive", str(archive)],
        check=True,
        capture_output=True,
    )
    page = root / f"{name}.html"
    started = time.perf_counter()
    html_command = ["analyze", str(archive), "--format", "html", "-o", str(page)]
    done = subprocess.run(
        [sys.executable, "-m", "fr_otel", *html_command],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"fr-otel analyze failed: {done.stderr}")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fr_otel", "analyze", str(archive)], capture_output=True, check=False
    )
    text_s = time.perf_counter() - started
    return page, elapsed, text_s


def _measure(browser: Any, page_path: Path, loads: int) -> dict[str, Any]:
    firsts, walls, redraws, switches = [], [], [], []
    frame: dict[str, Any] = {}
    all_frame: dict[str, Any] = {}
    views: list[dict[str, Any]] = []
    for _ in range(loads):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        started = time.perf_counter()
        page.goto(page_path.resolve().as_uri())
        page.wait_for_function("window.frReport && window.frReport.ready", timeout=60_000)
        walls.append(time.perf_counter() - started)
        firsts.append(page.evaluate("frReport.firstRenderMs") / 1000)
        redraws.append(page.evaluate("frReport.timeDraw(20)"))
        frame = page.evaluate("frReport.frame()")
        switches.append(
            page.evaluate(
                "(() => { const t = performance.now(); frReport.setView('all');"
                " return performance.now() - t; })()"
            )
        )
        all_frame = page.evaluate("frReport.frame()")
        views = page.evaluate("frReport.views()")
        if errors:
            raise SystemExit(f"page errors: {errors}")
        page.close()
    widest = max(views, key=lambda v: v["rows"] * v["cols"] if v["id"] != "all" else 0)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_path.resolve().as_uri())
    page.wait_for_function("window.frReport && window.frReport.ready", timeout=60_000)
    dom = page.evaluate(_DOM_TABLE, widest["id"])
    page.close()
    return {
        "first_s": statistics.median(firsts),
        "first_range": (min(firsts), max(firsts)),
        "wall_s": statistics.median(walls),
        "redraw_ms": statistics.median(redraws),
        "switch_ms": statistics.median(switches),
        "all_frame": all_frame,
        "frame": frame,
        "views": views,
        "widest": widest,
        "dom": dom,
        "size_mb": page_path.stat().st_size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--world", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=500, help="FR entries per rank")
    parser.add_argument("--loads", type=int, default=5, help="page loads per layout")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    layouts = {
        "one dp group (tp=1, pp=1)": FleetSpec(
            world=args.world, entries=args.entries, tp=1, pp=1, fault="skipped_collective"
        ),
        "3D (simulator default)": FleetSpec(
            world=args.world, entries=args.entries, fault="skipped_collective"
        ),
    }
    results = {}
    with tempfile.TemporaryDirectory(prefix="fr-otel-report-") as folder:
        root = Path(folder)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                for index, (name, spec) in enumerate(layouts.items()):
                    page, made_s, text_s = _write_report(root, f"layout{index}", spec)
                    results[name] = _measure(browser, page, args.loads)
                    results[name]["made_s"] = made_s
                    results[name]["text_s"] = text_s
            finally:
                browser.close()
    print(f"HTML report, {args.world} ranks x {args.entries} FR entries each, skipped collective;")
    print(f"headless Chromium ({chromium}), median of {args.loads} loads per layout\n")
    for name, r in results.items():
        widest, dom = r["widest"], r["dom"]
        low, high = r["first_range"]
        print(f"{name}: page {r['size_mb']:.1f} MB, views:")
        for view in r["views"]:
            print(f"    {view['label']:<44} {view['rows']:>5} rows x {view['cols']:>3} columns")
        print(
            f"  fr-otel analyze --format html (writes the page)  {r['made_s']:6.2f} s"
            f"   (the text verdict alone: {r['text_s']:.2f} s)"
        )
        print(
            f"  first render, navigation to first grid draw     {r['first_s']:6.3f} s"
            f"   (range {low:.3f}..{high:.3f}; Playwright wall {r['wall_s']:.3f} s)"
        )
        print(
            f"  redraw on scroll ({r['frame']['view']}, {r['frame']['rows']} x"
            f" {r['frame']['cols']})         {r['redraw_ms']:6.1f} ms"
        )
        print(
            f"  switch to the all-groups view ({r['all_frame']['rows']} x"
            f" {r['all_frame']['cols']}, first draw)  {r['switch_ms']:6.1f} ms"
        )
        print(
            f"  peer: the same {widest['rows']} x {widest['cols']} grid as a DOM table"
            f" ({dom['nodes']:,} <td>)  {dom['ms'] / 1000:6.3f} s to lay out and paint"
        )
        met = r["first_s"] < GOAL_S
        print(f"  goal (first render < {GOAL_S:.0f} s): {'met' if met else 'NOT met'}\n")


if __name__ == "__main__":
    main()
