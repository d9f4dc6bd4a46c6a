"""Execute the notebooks (without Jupyter: execnb runs them in-process) and render them to a static, offline HTML site.

    python tools/render_docs.py --out html       # offline docs site: html/index.html + one page per notebook
    python tools/render_docs.py --screenshots    # ... and PNGs of a few pages in html/screenshots/ (needs chromium)
    python tools/render_docs.py --inplace        # refresh the outputs stored in nbs/*.ipynb (then run nbdev_clean)
    python tools/render_docs.py --readme         # README.md from the stored nbs/index.ipynb (nbdev_readme, no quarto)
    python tools/render_docs.py --shrink         # hold the stored outputs to the policy (pictures <= 50 KB)

The site is what nbdev_docs makes with quarto, without quarto: the notebooks are read through nbdev's own processors
(the H1 and `>` line become the page's title block, a `show_doc` cell follows every exported definition) and the cells
go through nbconvert's basic template into one page skeleton with inlined styles: a sidebar of every page in order (the
home page, the architecture page, then the chapters by name), an API block per exported name (signature, docstring,
docments table) where the exported code was (as nbdev shows it; `#| exports` cells keep their code), hidden cells and
directive lines left out, plots embedded. Nothing is loaded from the network.
"""
import argparse, base64, html, inspect, io, json, os, re, sys, textwrap
from enum import EnumMeta
from functools import partial
from pathlib import Path
from execnb.nbio import nb2dict, write_nb
from execnb.shell import CaptureShell
from fastcore.docments import DocmentTbl
from nbdev.showdoc import BasicMarkdownRenderer, show_doc
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'
FIRST = ('index', 'architecture')  # the pages before the chapters, in this order
SHOTS = ('index', '00_routing', '03_lora')  # the pages `--screenshots` takes: the home page, API blocks, plots

def page_order(paths) -> list:
    "Notebook paths in sidebar order: the home page, the architecture page, then the chapters by name"
    rank = lambda p: (FIRST.index(p.stem) if p.stem in FIRST else len(FIRST), p.name)
    return sorted(paths, key=rank)

def title_of(path: Path) -> str:
    "The notebook's H1 title (its first markdown line starting with '# '), else its file name"
    for cell in json.loads(Path(path).read_text())['cells']:
        if cell['cell_type'] != 'markdown': continue
        for line in ''.join(cell['source']).splitlines():
            if line.startswith('# '): return line[2:].strip()
    return Path(path).stem

def signature(name: str, sig: inspect.Signature, module='__main__', width=100) -> str:
    "`name(params) -> ret`, wrapped between parameters (never inside one) at `width`, names of `module` unqualified"
    ret = sig.return_annotation
    ret = '' if ret in (sig.empty, None, 'None') else f' -> {inspect.formatannotation(ret)}'
    params = [p for i, p in enumerate(sig.parameters.values()) if not (i == 0 and p.name == 'self' and '.' in name)]
    text = f"{name}({', '.join(map(str, params))}){ret}".replace(f'{module}.', '')  # a method's `self` left out
    glued = re.sub(r'(?<!,) ', '\0', text)  # textwrap breaks only at whitespace: keep only the spaces after commas
    lines = textwrap.wrap(glued, width, subsequent_indent='    ', break_long_words=False, break_on_hyphens=False)
    return '\n'.join(lines).replace('\0', ' ')

def _cell(o):
    """A docments table cell as text on one line: a `|` (as in `str | None`) escaped and the lines of a comment
    written above its parameter joined, so that the table keeps its rows and columns"""
    if o is inspect.Parameter.empty: return o
    return ' '.join(getattr(o, '__name__', str(o)).replace('|', r'\|').split('\n'))

class DocTable(DocmentTbl):
    "fastcore's docments table (type, default and comment of each parameter), safe for union types and long comments"
    def _row(self, nm, props): return list(map(_cell, super()._row(nm, props)))
    @property
    def return_str(self):
        cells = [_cell(self.dm['return'][c]) for c in self._columns]
        return '| **Returns** | ' + ' | '.join('' if v is inspect.Parameter.empty else f'**{v}**' for v in cells) + ' |'

class ApiBlock(BasicMarkdownRenderer):
    "`show_doc` the way nbdev's site shows it: the name, the signature, the docstring, then the table of docments"
    def _repr_markdown_(self):
        parts = [f'### {self.nm}']
        members = ', '.join(getattr(self.sym, '__members__', ()))
        if isinstance(self.sym, EnumMeta): parts.append(f'```python\n{self.nm} = [{members}]\n```')
        elif self.sig is not None: parts.append(f'```python\n{signature(self.nm, self.sig, self.sym.__module__)}\n```')
        if self.docs:
            first, nl, rest = self.docs.partition('\n')
            parts.append(f'*{first.strip()}*{nl}{rest}')
        table = DocTable(self.sym)._repr_markdown_()
        return '\n\n'.join(parts + ([table] if table else []))

def notebook(path: Path, docs=True):
    "Notebook `path` as nbdev_docs reads it (title block out, `show_doc` cells in, directives removed), else as is"
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.process import NBProcessor
    from nbdev.processors import add_show_docs
    proc = NBProcessor(path, procs=[FrontmatterProc, add_show_docs] if docs else [], rm_directives=docs)
    proc.process()
    return proc.nb

def run(nb, flags=()):
    "Execute notebook `nb` (from `notebook`) in its folder, but not `nbdev_export()`, `eval: false` or slow cells (unless in `flags`)"
    skip = lambda c: (any(f in c.directives_ for f in ('slow',) if f not in flags) or 'nbdev_export()' in c.source
                      or c.directives_.get('eval:', [''])[0].lower() == 'false')
    here = os.getcwd()
    os.chdir(Path(nb.path_).parent)
    try:
        shell = CaptureShell()
        shell.user_ns['show_doc'] = partial(show_doc, renderer=ApiBlock)
        shell.run_all(nb, exc_stop=True, preproc=skip)
    finally: os.chdir(here)
    return nb

def local_links(text: str) -> str:
    "Links to notebooks (`x.ipynb`, `x.ipynb#part`) made links to their pages (`x.html`)"
    return re.sub(r'href="([\w.-]+)\.ipynb(#[^"]*)?"', lambda m: f'href="{m[1]}.html{m[2] or ""}"', text)

WIDGET = 'application/vnd.jupyter.widget-view+json'
WIDGET_NOTE = {'output_type': 'display_data', 'metadata': {}, 'data': {'text/html': '<p><em>An interactive widget: it '
               'runs in Jupyter (open this notebook there); the static figures below show the same view.</em></p>'}}

def _text(v) -> str: return ''.join(v) if isinstance(v, list) else v

# the leading `#|` lines nbdev leaves in a cell: quarto options, and all of a cell that holds nothing but directives
DIRECTIVES = re.compile(r'\A(?:[ \t]*#[ \t]*\|.*(?:\n|\Z))+')

def as_shown(out: dict) -> dict:
    "Output `out` as a terminal shows it: a line rewritten after a carriage return (progress bars) keeps its last state"
    if out['output_type'] != 'stream': return out
    return {**out, 'text': re.sub(r'[^\n]*\r(?!\n)', '', _text(out['text']))}

HIDDEN = {'hide', 'export', 'exporti', 'default_exp'}  # as nbdev's rm_export: an exported cell shows as its API block

def shown(cell):
    "`cell` as the site shows it, else None: hidden cells and empty inputs gone, show_doc as its markdown"
    if cell.get('has_sd'):
        md = next(_text(o.data['text/markdown']) for o in cell.outputs if 'text/markdown' in o.get('data', {}))
        return {'cell_type': 'markdown', 'metadata': {}, 'source': f'<div class="api">\n\n{md}\n\n</div>'}
    if cell.cell_type == 'raw' or HIDDEN & set(cell.get('directives_', {})): return None
    c = nb2dict(cell)
    if c['cell_type'] != 'code': return c
    c['source'] = DIRECTIVES.sub('', _text(c['source']))
    c['outputs'] = [WIDGET_NOTE if WIDGET in o.get('data', {}) else o for o in map(as_shown, c.get('outputs', []))]
    c['outputs'] = [o for o in c['outputs'] if o['output_type'] != 'stream' or o['text'].strip()]
    if not c['source'].strip():
        if not c['outputs']: return None
        c['metadata']['transient'] = {'remove_source': True}
    if 'exports' in cell.directives_: c['metadata']['tags'] = ['exported']
    return c

def to_html(nb) -> str:
    "The notebook's cells as an HTML fragment (nbconvert's basic template, no prompts), links to notebooks made local"
    import nbformat
    from nbconvert import HTMLExporter
    d = nb2dict(nb)
    d['cells'] = list(filter(None, map(shown, nb.cells)))
    for i, c in enumerate(d['cells']): c.setdefault('id', f'cell-{i}')  # show_doc cells are new; nbformat 4.5 wants ids
    d['metadata'].pop('widgets', None)  # widget state would come with a <script>; the widgets are replaced by notes
    exporter = HTMLExporter(template_name='basic', exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.reads(json.dumps(d), as_version=4))
    return local_links(body)

SITE_CSS = """
:root { --accent: #2780e3; --line: #dee2e6; --code-bg: #f6f8fa; --muted: #6c757d; }
* { box-sizing: border-box; }
html { scroll-padding-top: 70px; }
body { margin: 0; color: #212529; background: #fff; font: 16px/1.6 system-ui, -apple-system, "Segoe UI", Roboto,
  "Helvetica Neue", Arial, sans-serif; overflow-wrap: normal; word-break: normal; hyphens: none; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
header.navbar { position: fixed; top: 0; left: 0; right: 0; height: 56px; z-index: 2; display: flex;
  align-items: center; gap: 24px; padding: 0 24px; background: var(--accent); }
header.navbar a { color: #fff; font-size: 17px; }
header.navbar a.site { font-size: 20px; font-weight: 600; }
nav.edge0-sidebar { position: fixed; top: 56px; left: 0; bottom: 0; width: 270px; overflow-y: auto; padding: 20px 12px;
  border-right: 1px solid var(--line); font-size: 14.5px; line-height: 1.35; }
nav.edge0-sidebar ul { list-style: none; padding: 0; margin: 0; }
nav.edge0-sidebar li a { display: block; padding: 5px 10px; border-radius: 4px; color: #343a40; }
nav.edge0-sidebar li a:hover { background: #f1f3f5; text-decoration: none; }
nav.edge0-sidebar li a.active { color: var(--accent); font-weight: 600; background: #e9f2fc; }
nav.edge0-sidebar li.gap { margin-top: 10px; padding-top: 10px; border-top: 1px solid var(--line); }
nav.toc { position: fixed; top: 76px; right: 16px; width: 220px; max-height: calc(100vh - 96px); overflow-y: auto;
  font-size: 13.5px; line-height: 1.35; border-left: 1px solid var(--line); padding-left: 12px; }
nav.toc h2 { font-size: 13.5px; margin: 0 0 6px; }
nav.toc a { display: block; padding: 3px 0; color: var(--muted); }
main { margin: 56px 250px 0 270px; padding: 24px 40px 60px; max-width: 980px; }
@media (max-width: 1300px) { nav.toc { display: none; } main { margin-right: 0; } }
@media (max-width: 900px) { nav.edge0-sidebar { position: static; width: auto; max-height: 40vh; margin-top: 56px;
  border-right: 0; border-bottom: 1px solid var(--line); } main { margin: 0; padding: 16px; } }
#title-block-header { margin-bottom: 28px; padding-bottom: 8px; border-bottom: 1px solid var(--line); }
#title-block-header h1.title { font-size: 2.3rem; line-height: 1.2; margin: 12px 0 6px; }
#title-block-header .description p { margin: 0 0 10px; line-height: 1.45; }
h1, h2, h3 { line-height: 1.25; font-weight: 600; }
h2 { margin-top: 2.2rem; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
a.anchor-link { visibility: hidden; margin-left: 6px; font-size: 0.8em; color: var(--muted); }
h1:hover a.anchor-link, h2:hover a.anchor-link, h3:hover a.anchor-link, h4:hover a.anchor-link { visibility: visible; }
code { font: 0.875em/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; }
p code, li code, td code, h1 code, h2 code, h3 code, nav code { background: #f1f3f5; color: #9a3b5c; padding: 1px 4px;
  border-radius: 3px; }
pre { margin: 0; padding: 10px 14px; font: 13.5px/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono",
  monospace; white-space: pre; overflow-x: auto; overflow-wrap: normal; word-break: normal; }
.cell { margin: 0 0 1rem; }
.input_area .highlight, .text_cell_render .highlight { background: var(--code-bg); border-radius: 6px; }
.celltag_exported .input_area .highlight { border-left: 3px solid var(--accent); }
.celltag_exported .input_area::before { content: "Exported source"; display: block; font-size: 12px;
  color: var(--muted); margin-bottom: 2px; }
.output_area pre { margin-left: 0.8rem; border-left: 2px solid lightsalmon; background: none; }
.output_stderr pre { border-left-color: #dc3545; background: #fff5f5; }
.output_area img { max-width: calc(100% - 0.8rem); height: auto; display: block; margin: 8px 0 8px 0.8rem; }
.text_cell_render img { max-width: 100%; }
table { border-collapse: collapse; margin: 12px 0 18px; display: block; max-width: 100%; overflow-x: auto;
  font-size: 14.5px; }
th, td { padding: 4px 12px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { border-bottom: 2px solid #adb5bd; white-space: nowrap; }
tbody tr:nth-child(odd) { background: #f8f9fa; }
.api { border: 1px solid var(--line); border-radius: 6px; box-shadow: 0 .125rem .25rem rgba(0,0,0,.075);
  padding: 4px 18px 8px; margin: 0 0 1.5rem; }
.api h3 { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 1.15rem;
  margin: 14px 0 10px; }
.api .highlight { background: var(--code-bg); border-radius: 6px; }
.api table { width: 100%; display: table; }
.api a.source { float: right; font-size: 13px; margin-top: 16px; }
blockquote { margin: 12px 0; padding: 2px 16px; border-left: 4px solid var(--line); color: #495057; }
"""

def sidebar(pages: list, current: str) -> str:
    "The sidebar: one entry per page `(name, title)`, `current` highlighted"
    items = []
    for i, (name, title) in enumerate(pages):
        gap = ' class="gap"' if i == len([p for p in pages if p[0] in FIRST]) else ''
        active = ' class="active"' if name == current else ''
        label = 'Home' if name == 'index' else re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(title))
        items.append(f'<li{gap}><a href="{name}.html" title="{name}.ipynb"{active}>{label}</a></li>')
    return f'<nav class="edge0-sidebar"><ul>{"".join(items)}</ul></nav>'

def toc(body: str) -> str:
    "The page's H2 sections as an 'On this page' list (empty when there are fewer than two)"
    heads = re.findall(r'<h2 id="([^"]+)">(.*?)<a class="anchor-link"', body)
    links = ''.join(f'<a href="#{i}">{t}</a>' for i, t in heads)
    return f'<nav class="toc"><h2>On this page</h2>{links}</nav>' if len(heads) > 1 else ''

def inline_md(text: str) -> str:
    "Markdown `text` of one paragraph as inline HTML"
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    return re.sub(r'^<p>(.*)</p>\s*$', r'\1', markdown2html_mistune(text).strip(), flags=re.S)

# keeps the current page in view in a long sidebar
SCRIPT = "document.querySelector('nav.edge0-sidebar a.active')?.scrollIntoView({block: 'nearest'});"

def page(nb, pages: list, current: str) -> str:
    "The whole HTML page of executed notebook `nb`: navbar, sidebar, title block, cells, table of contents"
    from pygments.formatters import HtmlFormatter
    fm = nb.get('frontmatter_', {})
    title = fm.get('title', current)
    desc = f'<div class="description"><p>{inline_md(fm["description"])}</p></div>' if fm.get('description') else ''
    css = SITE_CSS + HtmlFormatter(style='default').get_style_defs('.highlight') + (NBS / 'styles.css').read_text()
    body = to_html(nb)
    plain = title.replace('`', '')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(plain if current == 'index' else f'{plain} – edge0')}</title>
<link rel="icon" href="data:,"><style>{css}</style></head>
<body>
<header class="navbar"><a class="site" href="index.html">edge0</a><a href="architecture.html">Architecture</a></header>
{sidebar(pages, current)}
<main><header id="title-block-header"><h1 class="title">{inline_md(title)}</h1>{desc}</header>
{body}</main>
{toc(body)}
<script>{SCRIPT}</script>
</body></html>
"""

def screenshots(out: Path, stems):
    "PNGs of the tops (1280x900) of pages `stems` of the site in `out`, in `out/screenshots`, if chromium is here"
    from browser import Browser, chromium_path  # tools/browser.py, beside this script
    if not chromium_path(): return print('no chromium on PATH: no screenshots (apt-get install chromium)')
    (out / 'screenshots').mkdir(exist_ok=True)
    with Browser() as b:
        for stem in stems:
            errors = b.open((out / f'{stem}.html').resolve().as_uri())
            b.screenshot(out / 'screenshots' / f'{stem}.png')
            print('screenshot', out / 'screenshots' / f'{stem}.png', *(f'\n  page error: {e}' for e in errors))

def repo_url() -> str:
    "Where the repository's files are read on the web (settings.ini's git_url and branch)"
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / 'settings.ini')
    return f"{cfg['DEFAULT']['git_url']}/blob/{cfg['DEFAULT']['branch']}"

def readme_links(markdown: str) -> str:
    "Links to notebooks (`x.ipynb`) made links to the repository's files, which work on PyPI as on GitHub"
    def fix(m):
        target = m[2].split('#')[0]
        return f'{m[1]}({repo_url()}/nbs/{m[2]})' if target.endswith('.ipynb') and (NBS / target).exists() else m[0]
    return re.sub(r'(\[[^\]]*\])\(([^)\s]+)\)', fix, markdown)

def _stored_text(cell) -> str:
    "The text a stored code cell printed or returned"
    outs = cell.get('outputs', [])
    return ''.join(''.join(o.get('text', '')) or ''.join(o.get('data', {}).get('text/plain', '')) for o in outs)

def readme() -> str:
    "README.md from the stored nbs/index.ipynb: markdown as is (notebook links to the repository), code and its output"
    nb, out = json.loads((NBS / 'index.ipynb').read_text()), []
    for c in nb['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': out.append(readme_links(src))
        elif not src.lstrip().startswith(('#| hide', '#|hide')):
            out.append(f"```python\n{src}\n```")
            if _stored_text(c).strip(): out.append(f"```\n{_stored_text(c).rstrip()}\n```")
    head = '<!-- generated from nbs/index.ipynb by tools/render_docs.py --readme; edit the notebook -->\n\n'
    return head + '\n\n'.join(out) + '\n'

PICTURE_BYTES = 50 * 1024  # the output policy: a stored picture at most this big ...
TEXT_BYTES = 16 * 1024     # ... and a stored text output at most this long (the rest belongs in bench/results)

def fit_picture(png: bytes, width: int | None = None, limit: int = PICTURE_BYTES) -> bytes:
    "`png` within `limit` bytes if it can be: 256 colours, then smaller down to its display `width`, then fewer colours"
    if len(png) <= limit: return png
    im, best = Image.open(io.BytesIO(png)).convert('RGB'), png
    floor = min(width or im.width, im.width)
    def encode(img, colours):
        buf = io.BytesIO()
        img.quantize(colours, method=Image.Quantize.MEDIANCUT).save(buf, 'PNG', optimize=True)
        return buf.getvalue()
    while True:
        best = min(best, encode(im, 256), key=len)
        if len(best) <= limit or im.width <= floor: break
        w = max(int(im.width * 0.8), floor)
        im = im.resize((w, round(im.height * w / im.width)), Image.Resampling.LANCZOS)
    for colours in (128, 64, 32):  # a plot's lines and labels survive a small palette
        if len(best) <= limit: break
        best = min(best, encode(im, colours), key=len)
    return best

def shrink(path: Path) -> int:
    "Hold notebook `path`'s stored pictures to the policy, their displayed size kept; returns the bytes saved"
    d, saved = json.loads(Path(path).read_text()), 0
    for c in d['cells']:
        for o in c.get('outputs', []):
            data = o.get('data', {})
            if 'image/png' not in data: continue
            png = base64.b64decode(_text(data['image/png']))
            if len(png) <= PICTURE_BYTES: continue
            shown = o.setdefault('metadata', {}).setdefault('image/png', {})
            if 'width' not in shown:  # displayed at its pixel size until now: keep that size on the page
                shown.update(zip(('width', 'height'), Image.open(io.BytesIO(png)).size))
            small = fit_picture(png, shown['width'])
            data['image/png'] = base64.b64encode(small).decode() + '\n'
            saved += len(png) - len(small)
    if saved: Path(path).write_text(json.dumps(d, indent=1, ensure_ascii=False) + '\n')
    return saved

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default=str(ROOT / 'html'), help='folder of the offline site')
    ap.add_argument('--screenshots', action='store_true',
                    help=f"also PNGs of pages {', '.join(SHOTS)} (those rendered) in OUT/screenshots, with chromium")
    ap.add_argument('--inplace', action='store_true', help='store fresh outputs back into the notebooks instead')
    ap.add_argument('--flags', nargs='*', default=[], help='also run cells with these flags (e.g. slow)')
    ap.add_argument('notebooks', nargs='*', default=None, help='render only these (the sidebar still lists every page)')
    ap.add_argument('--readme', action='store_true', help='write README.md from nbs/index.ipynb and stop')
    ap.add_argument('--shrink', action='store_true', help='hold the stored pictures to 50 KB each and stop')
    a = ap.parse_args()
    if a.readme:
        (ROOT / 'README.md').write_text(readme())
        return print('wrote README.md')
    every = page_order(NBS.glob('*.ipynb'))
    if a.shrink:
        for p in (page_order(Path(x).resolve() for x in a.notebooks) if a.notebooks else every):
            if (n := shrink(p)): print(f'{p.relative_to(ROOT)}: {n / 1024:.0f} KB less')
        return
    paths = page_order(Path(p).resolve() for p in a.notebooks) if a.notebooks else every
    pages = [(p.stem, title_of(p)) for p in every]
    out = Path(a.out)
    if not a.inplace: out.mkdir(parents=True, exist_ok=True)
    failed, rendered = [], []
    for p in paths:
        try: nb = run(notebook(p, docs=not a.inplace), a.flags)
        except Exception as e:  # one broken notebook should not hide the others: report it, render the rest
            failed.append(p.name)
            print(f'FAILED {p.name}: {type(e).__name__}: {e}', file=sys.stderr)
            continue
        if a.inplace:
            write_nb(nb, p)
            shrink(p)
            print('refreshed', p.relative_to(ROOT))
            continue
        (out / f'{p.stem}.html').write_text(page(nb, pages, p.stem))
        rendered.append(p.stem)
        print('rendered', out / f'{p.stem}.html')
    if a.screenshots and rendered: screenshots(out, [s for s in SHOTS if s in rendered])
    if failed: sys.exit(f"{len(failed)} notebook(s) failed: {', '.join(failed)}")

if __name__ == '__main__': main()
