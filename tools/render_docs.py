"""Execute the notebooks (without Jupyter: execnb runs them in-process) and render them to static HTML.

    python tools/render_docs.py --out html       # offline docs site: html/index.html + one page per notebook, with a sidebar
    python tools/render_docs.py --inplace        # refresh the outputs stored in nbs/*.ipynb (then run nbdev_clean)
    python tools/render_docs.py --readme         # README.md from nbs/index.ipynb as stored (what nbdev_readme does with quarto)

The rendered site is what quarto would show, without quarto: markdown, code and the outputs of a fresh run, every page
listed in a sidebar (the home page, the architecture page, then the chapters in order), links between notebooks working.
"""
import argparse, html, json, os, re, sys
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'
FIRST = ('index', 'architecture')  # the pages before the chapters, in this order

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

def run(path: Path, flags=()):
    "Execute notebook `path` in its folder; returns the executed notebook (cells flagged slow are skipped unless in `flags`)"
    nb = read_nb(path)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        shell = CaptureShell()
        def skip(cell):
            head = cell.source.splitlines()[:3]
            flagged = any(f'#| {f}' in head or f'#|{f}' in head for f in ('slow',) if f not in flags)
            return flagged or 'nbdev_export()' in cell.source
        shell.run_all(nb, exc_stop=True, preproc=skip)
    finally: os.chdir(here)
    return nb

def local_links(text: str) -> str:
    "Links to notebooks (`x.ipynb`, `x.ipynb#part`) made links to their pages (`x.html`)"
    return re.sub(r'href="([\w.-]+)\.ipynb(#[^"]*)?"', lambda m: f'href="{m[1]}.html{m[2] or ""}"', text)

WIDGET = 'application/vnd.jupyter.widget-view+json'
WIDGET_NOTE = {'output_type': 'display_data', 'metadata': {}, 'data': {'text/html': '<p><em>An interactive widget: it '
               'runs in Jupyter (open this notebook there); the static figures below show the same view.</em></p>'}}

def to_html(nb, title: str) -> str:
    "The notebook's cells as HTML (a whole page from nbconvert's classic template), nbdev directives and hidden cells left out"
    import nbformat
    from nbconvert import HTMLExporter
    node = nbformat.reads(json.dumps(nb), as_version=4)
    for c in node.cells:  # hide nbdev directives and hidden cells, as the quarto site does
        if c.cell_type == 'code':
            lines = c.source.splitlines()
            if any(l.strip().replace(' ', '') in ('#|hide',) for l in lines[:3]): c.source, c.outputs = '', []
            c.source = '\n'.join(l for l in c.source.splitlines() if not l.lstrip().startswith('#|'))
            c.outputs = [nbformat.from_dict(WIDGET_NOTE) if WIDGET in o.get('data', {}) else o for o in c.outputs]
    node.cells = [c for c in node.cells if c.cell_type != 'code' or c.source.strip() or c.outputs]
    body, _ = HTMLExporter(template_name='classic').from_notebook_node(node, resources={'metadata': {'name': title}})
    return local_links(body)

SITE_CSS = """
body { margin: 0; }
nav.edge0-sidebar { position: fixed; top: 0; left: 0; bottom: 0; width: 260px; overflow-y: auto; padding: 18px 14px;
  box-sizing: border-box; background: #f7f7f9; border-right: 1px solid #e3e3e8; font: 14px/1.4 system-ui, sans-serif; }
nav.edge0-sidebar .site { display: block; font-size: 20px; font-weight: 600; color: #222; text-decoration: none; margin-bottom: 12px; }
nav.edge0-sidebar ul { list-style: none; padding: 0; margin: 0; }
nav.edge0-sidebar li a { display: block; padding: 4px 8px; border-radius: 4px; color: #333; text-decoration: none; }
nav.edge0-sidebar li a:hover { background: #e9e9ef; }
nav.edge0-sidebar li a.active { background: #2780e3; color: #fff; }
nav.edge0-sidebar li .stem { display: block; font-size: 11px; opacity: 0.65; }
nav.edge0-sidebar li.gap { margin-top: 10px; }
div.edge0-page { margin-left: 260px; }
div.edge0-page #notebook-container { width: auto; max-width: 1100px; box-shadow: none; }
div.edge0-page .prompt { min-width: 0; width: 0; padding: 0; overflow: hidden; }
div.edge0-page .rendered_html pre { white-space: pre; overflow-x: auto; }
div.edge0-page .rendered_html th, div.edge0-page .rendered_html td { text-align: left; }
"""

def sidebar(pages: list, current: str) -> str:
    "The sidebar: one entry per page `(name, title)`, `current` highlighted"
    items = []
    for i, (name, title) in enumerate(pages):
        stem = '' if name in FIRST else f'<span class="stem">{html.escape(name)}</span>'
        gap = ' class="gap"' if i == len([p for p in pages if p[0] in FIRST]) else ''
        active = ' class="active"' if name == current else ''
        label = 'Home' if name == 'index' else re.sub(r'`([^`]+)`', r'<code>\1</code>', html.escape(title))
        items.append(f'<li{gap}><a href="{name}.html"{active}>{stem}{label}</a></li>')
    return f'<nav class="edge0-sidebar"><a class="site" href="index.html">edge0</a><ul>{"".join(items)}</ul></nav>'

def with_sidebar(page: str, pages: list, current: str, title: str) -> str:
    "`page` (a whole HTML document) with the site's sidebar, styles and title"
    css = SITE_CSS + (NBS / 'styles.css').read_text()
    page = re.sub(r'<title>.*?</title>', f'<title>{html.escape(title)} – edge0</title>', page, count=1, flags=re.S)
    page = page.replace('</head>', f'<style>{css}</style>\n</head>', 1)
    page = page.replace('<body>', f'<body>\n{sidebar(pages, current)}\n<div class="edge0-page">', 1)
    return page.replace('</body>', '</div>\n</body>', 1)

def readme_links(markdown: str) -> str:
    "Markdown links to notebooks (`x.ipynb`) made relative to the repository root (`nbs/x.ipynb`), for README.md"
    def fix(m):
        target = m[2].split('#')[0]
        return f'{m[1]}(nbs/{m[2]})' if target.endswith('.ipynb') and (NBS / target).exists() else m[0]
    return re.sub(r'(\[[^\]]*\])\(([^)\s]+)\)', fix, markdown)

def readme() -> str:
    "README.md from the stored nbs/index.ipynb: markdown as is (notebook links made relative to the root), code with its stored text output"
    nb, out = json.loads((NBS / 'index.ipynb').read_text()), []
    for c in nb['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': out.append(readme_links(src))
        elif not src.lstrip().startswith(('#| hide', '#|hide')):
            out.append(f"```python\n{src}\n```")
            text = ''.join(''.join(o.get('text', '')) or ''.join(o.get('data', {}).get('text/plain', '')) for o in c.get('outputs', []))
            if text.strip(): out.append(f"```\n{text.rstrip()}\n```")
    return '<!-- generated from nbs/index.ipynb by tools/render_docs.py --readme; edit the notebook -->\n\n' + '\n\n'.join(out) + '\n'

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default=str(ROOT / 'html'), help='folder of the offline site')
    ap.add_argument('--inplace', action='store_true', help='store fresh outputs back into the notebooks instead')
    ap.add_argument('--flags', nargs='*', default=[], help='also run cells with these flags (e.g. slow)')
    ap.add_argument('notebooks', nargs='*', default=None, help='render only these (the sidebar still lists every page)')
    ap.add_argument('--readme', action='store_true', help='write README.md from nbs/index.ipynb and stop')
    a = ap.parse_args()
    if a.readme: (ROOT / 'README.md').write_text(readme()); print('wrote README.md'); return
    every = page_order(NBS.glob('*.ipynb'))
    paths = page_order(Path(p).resolve() for p in a.notebooks) if a.notebooks else every
    pages = [(p.stem, title_of(p)) for p in every]
    out = Path(a.out)
    if not a.inplace: out.mkdir(parents=True, exist_ok=True)
    failed = []
    for p in paths:
        try: nb = run(p, a.flags)
        except Exception as e:  # one broken notebook should not hide the others: report it, render the rest
            failed.append(p.name)
            print(f'FAILED {p.name}: {type(e).__name__}: {e}', file=sys.stderr)
            continue
        if a.inplace: write_nb(nb, p); print('refreshed', p.relative_to(ROOT)); continue
        title = title_of(p)
        (out / f'{p.stem}.html').write_text(with_sidebar(to_html(nb, title), pages, p.stem, title))
        print('rendered', out / f'{p.stem}.html')
    if failed: sys.exit(f"{len(failed)} notebook(s) failed: {', '.join(failed)}")

if __name__ == '__main__': main()
