"""Lay a report out as a reviewer sees it: GitHub's GFM parser (cmark-gfm) to HTML, a page of
GitHub's comment width and table style, Mermaid drawing the charts, in headless Chromium.

The page measures itself (``CHECKS_JS``) and writes what it found as JSON into the DOM;
``chromium --dump-dom`` returns that, a second run takes the screenshot. Needs Debian's
``chromium`` and ``tools/render/node_modules/mermaid`` (``make render-deps`` installs both);
:func:`missing` says which is absent.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MERMAID_JS = ROOT / "tools" / "render" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
# A pull-request comment's body on github.com at a 1280 px wide window (the timeline column
# less the avatar, borders and the body's padding).
COMMENT_WIDTH_PX = 760
_BROWSERS = ("chromium", "chromium-browser", "google-chrome")
_RESULT_RE = re.compile(r'<pre id="observer-ci-checks"[^>]*>(.*?)</pre>', re.DOTALL)

# GitHub's markdown-body rules that decide the layout (font, table cells, code, details).
_CSS = """
body { margin: 0; background: #fff; }
.markdown-body { box-sizing: border-box; width: %(width)dpx; padding: 16px; color: #1f2328;
  font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif;
  word-wrap: break-word; }
.markdown-body table { display: block; width: max-content; max-width: 100%%; overflow: auto;
  border-spacing: 0; border-collapse: collapse; margin: 0 0 16px; }
.markdown-body td, .markdown-body th { padding: 6px 13px; border: 1px solid #d1d9e0; }
.markdown-body th { font-weight: 600; }
.markdown-body tr:nth-child(2n) { background: #f6f8fa; }
.markdown-body code { padding: .2em .4em; font-size: 85%%; background: rgba(129,139,152,.12);
  border-radius: 6px; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.markdown-body pre { padding: 16px; overflow: auto; font-size: 85%%; background: #f6f8fa; }
.markdown-body h2 { font-size: 1.5em; border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; }
.markdown-body details { display: block; }
"""

CHECKS_JS = r"""
const SKIP = new Set(['CODE', 'PRE', 'SCRIPT', 'STYLE', 'svg']);
function lines(node) {
  const range = document.createRange(); range.selectNodeContents(node);
  const tops = [...range.getClientRects()].filter(r => r.width > 0).map(r => r.top);
  const distinct = [];
  for (const t of tops.sort((a, b) => a - b)) {
    if (!distinct.length || t - distinct[distinct.length - 1] > 8) distinct.push(t);
  }
  return distinct.length;
}
function overlaps(a, b) {
  return a.left < b.right - 0.5 && b.left < a.right - 0.5 &&
         a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
}
async function check() {
  document.querySelectorAll('details').forEach(d => d.open = true);
  const blocks = [...document.querySelectorAll('pre[lang="mermaid"]')];
  for (const pre of blocks) {
    const div = document.createElement('div');
    div.className = 'mermaid'; div.textContent = pre.textContent; pre.replaceWith(div);
  }
  const result = {charts: [], tables: [], stray: [], code: [], errors: []};
  if (blocks.length) {
    try {
      mermaid.initialize({startOnLoad: false, theme: 'default'});
      await mermaid.run({querySelector: '.mermaid'});
    } catch (e) { result.errors.push(String(e)); }
  }
  const body = document.querySelector('.markdown-body');
  const box = body.getBoundingClientRect();
  result.width = body.clientWidth;
  result.height = Math.ceil(body.scrollHeight);
  document.querySelectorAll('.markdown-body table').forEach((table, t) => {
    const cells = [...table.querySelectorAll('th, td')].map(c => {
      const r = c.getBoundingClientRect();
      return {text: c.textContent, lines: lines(c), right: r.right - box.left,
              row: c.parentElement.rowIndex};
    });
    result.tables.push({index: t, scroll: table.scrollWidth, client: table.clientWidth,
                        header: [...table.querySelectorAll('th')].map(h => h.textContent),
                        cells});
  });
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let p = n.parentElement, inert = false;
    for (; p && p !== body; p = p.parentElement) if (SKIP.has(p.tagName)) { inert = true; break; }
    if (!inert && /[\\`]/.test(n.data)) result.stray.push(n.data);
  }
  document.querySelectorAll('.markdown-body code').forEach(c => result.code.push(c.textContent));
  document.querySelectorAll('.mermaid').forEach(div => {
    const svg = div.querySelector('svg');
    if (!svg) { result.charts.push({drawn: false}); return; }
    const texts = [...svg.querySelectorAll('text')].map(t => {
      const r = t.getBoundingClientRect();
      return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
    }).filter(t => t.text.trim());
    const clashes = [];
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++)
        if (overlaps(texts[i], texts[j])) clashes.push([texts[i].text, texts[j].text]);
    const bars = [...svg.querySelectorAll('rect')].filter(r => r.closest('[class*="bar-plot"]'));
    const r = svg.getBoundingClientRect();
    result.charts.push({drawn: true, bars: bars.length, texts: texts.map(t => t.text), clashes,
                        right: r.right - box.left});
  });
  const out = document.getElementById('observer-ci-checks');
  out.textContent = JSON.stringify(result);
}
check().catch(e => {
  document.getElementById('observer-ci-checks').textContent = JSON.stringify({fatal: String(e)});
});
"""


def chromium() -> str | None:
    return next((p for b in _BROWSERS if (p := shutil.which(b))), None)


def missing() -> str | None:
    """Why the browser checks cannot run here, or None."""
    gone = []
    if chromium() is None:
        gone.append("chromium is not installed (Debian: apt-get install -y chromium)")
    if not MERMAID_JS.is_file():
        where = MERMAID_JS.relative_to(ROOT)
        npm = "" if shutil.which("npm") else "; node and npm are not installed either"
        gone.append(f"mermaid is not installed ({where}: npm ci in tools/render{npm})")
    if gone:
        return "; ".join(gone) + ". `make render-deps` installs both."
    return None


def to_html(markdown: str) -> str:
    """The comment body as GitHub's cmark-gfm renders it (raw HTML kept, as GitHub's
    sanitiser keeps details, summary, pre and br)."""
    import cmarkgfm
    from cmarkgfm.cmark import Options

    options = Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_GITHUB_PRE_LANG
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=options)


def page(markdown: str, *, width: int = COMMENT_WIDTH_PX) -> str:
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        f"<style>{_CSS % {'width': width}}</style>"
        f'<script src="{MERMAID_JS.as_uri()}"></script></head><body>'
        f'<div class="markdown-body">{to_html(markdown)}</div>'
        '<pre id="observer-ci-checks" style="display:none"></pre>'
        f"<script>{CHECKS_JS}</script></body></html>"
    )


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
        "--virtual-time-budget=20000",
    ]
    return subprocess.run(
        [chromium() or "chromium", *flags, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def inspect(markdown: str, folder: Path, name: str, *, timeout: float = 90) -> dict:
    """Lay ``markdown`` out; write ``name.html`` and ``name.png`` into ``folder`` and return
    what the page measured (tables, stray text, code spans, charts)."""
    folder.mkdir(parents=True, exist_ok=True)
    html_path = folder.resolve() / f"{name}.html"
    html_path.write_text(page(markdown), encoding="utf-8")
    dumped = _run(["--dump-dom", html_path.as_uri()], timeout)
    found = _RESULT_RE.search(dumped.stdout)
    if not found or not found.group(1).strip():
        raise RuntimeError(f"the page wrote no checks: {dumped.stderr[-2000:]}")
    result = json.loads(html.unescape(found.group(1)))
    if "fatal" in result:
        raise RuntimeError(f"the page's checks failed: {result['fatal']}")
    height = min(max(result["height"], 200), 8000)
    shot = folder.resolve() / f"{name}.png"
    _run(
        [f"--screenshot={shot}", f"--window-size={COMMENT_WIDTH_PX},{height}", html_path.as_uri()],
        timeout,
    )
    result["screenshot"] = str(shot) if shot.is_file() else None
    return result
