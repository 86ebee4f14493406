"""The dashboard's chart library under the fleet page's load: 64 GPUs updating every second.

Each GPU card has a live chart of its last 300 samples (5 minutes at 1 Hz).
One "tick" appends one sample to each of the 64 charts and redraws them; the
time is measured until the next animation frame, so layout and paint count.
uPlot (what the dashboard uses) is compared with Chart.js (the common canvas
alternative, animations off) in the same headless Chromium, same page size,
same data.

    .venv/bin/python bench/dashboard_charts.py [--ticks 60] [--gpus 64]

Needs /usr/bin/chromium, the playwright Python package and frontend/node_modules
(npm ci in frontend/), plus Chart.js, which the dashboard itself does not depend on:
`npm install --no-save chart.js@4` in frontend/. Prints per-tick mean and p95 for each
library and the ratio.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
MODULES = REPO / "frontend" / "node_modules"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

PAGE = """<!doctype html><html><head><style>
body{margin:0;background:#0f1419;display:grid;grid-template-columns:repeat(4,300px);gap:6px}
.c{width:300px;height:80px;position:relative}</style></head><body></body></html>"""

BENCH = """
async ({lib, gpus, points, ticks}) => {
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const now = Math.floor(Date.now() / 1000);
  const cols = [];
  for (let g = 0; g < gpus; g++) {
    const xs = [], u = [], m = [];
    for (let i = 0; i < points; i++) {
      xs.push(now - points + i); u.push(Math.random() * 100); m.push(50 + Math.random() * 10);
    }
    cols.push([xs, u, m]);
  }
  document.body.innerHTML = '';
  const charts = [];
  for (let g = 0; g < gpus; g++) {
    const el = document.createElement('div'); el.className = 'c'; document.body.appendChild(el);
    if (lib === 'uplot') {
      charts.push(new uPlot({ width: 300, height: 80, legend: { show: false }, cursor: { show: false },
        axes: [{ show: false }, { show: false }], scales: { y: { range: [0, 100] } },
        series: [{}, { stroke: '#4fb3ff', fill: '#4fb3ff33', points: { show: false } },
                 { stroke: '#f5b945', points: { show: false } }] },
        cols[g], el));
    } else {
      const canvas = document.createElement('canvas'); el.appendChild(canvas);
      charts.push(new Chart(canvas, { type: 'line',
        data: { labels: cols[g][0].slice(), datasets: [
          { data: cols[g][1].slice(), borderColor: '#4fb3ff', backgroundColor: '#4fb3ff33', fill: true,
            pointRadius: 0, borderWidth: 1.5 },
          { data: cols[g][2].slice(), borderColor: '#f5b945', pointRadius: 0, borderWidth: 1.5 }] },
        options: { animation: false, responsive: false, maintainAspectRatio: false, events: [], normalized: true,
          plugins: { legend: { display: false }, tooltip: { enabled: false } },
          scales: { x: { display: false }, y: { display: false, min: 0, max: 100 } } } }));
      canvas.width = 300; canvas.height = 80;
    }
  }
  await frame(); await frame();
  const times = [];
  for (let t = 0; t < ticks; t++) {
    const t0 = performance.now();
    for (let g = 0; g < gpus; g++) {
      const [xs, u, m] = cols[g];
      xs.shift(); u.shift(); m.shift();
      xs.push(now + t); u.push(Math.random() * 100); m.push(50 + Math.random() * 10);
      if (lib === 'uplot') charts[g].setData([xs, u, m]);
      else {
        const c = charts[g];
        c.data.labels.shift(); c.data.labels.push(now + t);
        c.data.datasets[0].data.shift(); c.data.datasets[0].data.push(u[u.length - 1]);
        c.data.datasets[1].data.shift(); c.data.datasets[1].data.push(m[m.length - 1]);
        c.update('none');
      }
    }
    await frame();
    times.push(performance.now() - t0);
  }
  charts.forEach((c) => c.destroy());
  times.sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  return { mean, p95: times[Math.floor(times.length * 0.95) - 1] ?? times[times.length - 1],
           heap: performance.memory ? performance.memory.usedJSHeapSize : null };
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--points", type=int, default=300)
    ap.add_argument("--ticks", type=int, default=60)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    uplot_js = MODULES / "uplot" / "dist" / "uPlot.iife.min.js"
    chart_js = MODULES / "chart.js" / "dist" / "chart.umd.min.js"
    if not uplot_js.is_file():
        raise SystemExit(f"{uplot_js} is missing: run `npm ci` in frontend/")
    if not chart_js.is_file():
        raise SystemExit(f"{chart_js} is missing: the baseline is not a dashboard dependency; "
                         "run `npm install --no-save chart.js@4` in frontend/")
    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_content(PAGE)
        page.add_script_tag(path=str(uplot_js))
        page.add_script_tag(path=str(chart_js))
        params = {"gpus": args.gpus, "points": args.points, "ticks": args.ticks}
        # Warm-up of both, then the measured runs.
        for lib in ("uplot", "chartjs"):
            page.evaluate(BENCH, {**params, "lib": lib, "ticks": 5})
        for lib in ("uplot", "chartjs"):
            results[lib] = page.evaluate(BENCH, {**params, "lib": lib})
        browser.close()
    print(f"{args.gpus} live charts x {args.points} points, one sample per chart per tick, {args.ticks} ticks "
          "(update + next animation frame), headless Chromium")
    for lib, r in results.items():
        print(f"  {lib:8s} mean {r['mean']:7.2f} ms/tick   p95 {r['p95']:7.2f} ms/tick")
    ratio = results["chartjs"]["mean"] / max(results["uplot"]["mean"], 1e-9)
    print(f"  Chart.js / uPlot mean time per tick: {ratio:.1f}x")
    print(json.dumps({"uplot": results["uplot"], "chartjs": results["chartjs"], "ratio_mean": ratio}))


if __name__ == "__main__":
    main()
