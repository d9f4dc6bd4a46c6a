"""Execute the notebooks (without Jupyter: execnb runs them in-process) and render them to static HTML.

    python tools/render_docs.py --out html       # offline docs site: html/index.html + one page per notebook
    python tools/render_docs.py --inplace        # refresh the outputs stored in nbs/*.ipynb (then run nbdev_clean)
    python tools/render_docs.py --readme         # README.md from nbs/index.ipynb as stored (what nbdev_readme does with quarto)

The rendered site is what quarto would show, without quarto: markdown, code and the outputs of a fresh run.
"""
import argparse, copy, os, sys
from pathlib import Path
from execnb.nbio import read_nb, write_nb, dict2nb
from execnb.shell import CaptureShell

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'

def run(path: Path, flags=()):
    "Execute notebook `path` in its folder; returns the executed notebook (cells flagged slow are skipped unless in `flags`)"
    nb = read_nb(path)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        sh = CaptureShell()
        skip = lambda c: any(f'#| {f}' in c.source.splitlines()[:3] or f'#|{f}' in c.source.splitlines()[:3]
                             for f in ('slow',) if f not in flags) or 'nbdev_export()' in c.source
        sh.run_all(nb, exc_stop=True, preproc=skip)
    finally: os.chdir(here)
    return nb

def to_html(nb, title: str) -> str:
    import nbformat
    from nbconvert import HTMLExporter
    node = nbformat.reads(__import__('json').dumps(nb), as_version=4)
    for c in node.cells:  # hide nbdev directives and hidden cells, as the quarto site does
        if c.cell_type == 'code':
            lines = c.source.splitlines()
            if any(l.strip().replace(' ', '') in ('#|hide',) for l in lines[:3]): c.source, c.outputs = '', []
            c.source = '\n'.join(l for l in c.source.splitlines() if not l.lstrip().startswith('#|'))
    body, _ = HTMLExporter(template_name='classic').from_notebook_node(node, resources={'metadata': {'name': title}})
    return body

def readme() -> str:
    "README.md from the stored nbs/index.ipynb: markdown as is, code with its stored text output"
    import json
    nb, out = json.loads((NBS / 'index.ipynb').read_text()), []
    for c in nb['cells']:
        src = ''.join(c['source'])
        if c['cell_type'] == 'markdown': out.append(src)
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
    ap.add_argument('notebooks', nargs='*', default=None)
    ap.add_argument('--readme', action='store_true', help='write README.md from nbs/index.ipynb and stop')
    a = ap.parse_args()
    if a.readme: (ROOT / 'README.md').write_text(readme()); print('wrote README.md'); return
    paths = [Path(p).resolve() for p in a.notebooks] if a.notebooks else sorted(NBS.glob('*.ipynb'))
    out = Path(a.out)
    if not a.inplace: out.mkdir(parents=True, exist_ok=True)
    pages = []
    for p in paths:
        nb = run(p, a.flags)
        if a.inplace: write_nb(nb, p); print('refreshed', p.relative_to(ROOT)); continue
        name = 'index' if p.stem == 'index' else p.stem
        (out / f'{name}.html').write_text(to_html(nb, p.stem))
        pages.append(name); print('rendered', out / f'{name}.html')
    if pages and 'index' in pages:
        nav = ''.join(f'<li><a href="{n}.html">{n}</a></li>' for n in pages if n != 'index')
        idx = (out / 'index.html').read_text()
        (out / 'index.html').write_text(idx.replace('<body', f'<body', 1).replace('</body>', f'<hr><h2>Chapters</h2><ul>{nav}</ul></body>', 1))

if __name__ == '__main__': main()
