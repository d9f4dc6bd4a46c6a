"The offline docs rendering (no quarto here) checked in a browser, the architecture page, the README from index.ipynb"
import json, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'
sys.path.insert(0, str(ROOT / 'tools'))
from render_docs import page_order

def render(out: Path, *notebooks: str, flags=()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / 'tools' / 'render_docs.py'), '--out', str(out), *flags,
                           *[str(NBS / n) for n in notebooks]], capture_output=True, text=True, timeout=300)

# the pages the browser test renders: the two before the chapters and two chapters that run in a few seconds
SITE = ('index.ipynb', 'architecture.ipynb', '00_files.ipynb', '00_routing.ipynb')

@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    "The offline site of the `SITE` pages (its sidebar still lists every page), with screenshots if chromium is here"
    out = tmp_path_factory.mktemp('site')
    r = render(out, *SITE, flags=['--screenshots'])
    assert r.returncode == 0, r.stderr
    return out

def test_offline_html_renders_index(site):
    html = (site / 'index.html').read_text()
    assert 'Two commands' in html and 'sigmoid_group (1, 2, 3)' in html  # prose and a fresh output
    assert '<title>edge0</title>' in html and 'class="description"' in html  # the title block from the H1 and `>` line

def test_architecture_page_renders_with_every_page_in_the_sidebar(site):
    html = (site / 'architecture.html').read_text()
    for words in ('The layers', 'whole_layer', 'prerouter-k{K}.safetensors', 'edge0-trace/1', 'Contracts',
                  'Chapters and modules'):
        assert words in html, words
    start = html.index('<nav class="edge0-sidebar">')
    sidebar = html[start:html.index('</nav>', start)]
    stems = [p.stem for p in NBS.glob('*.ipynb')]
    assert all(f'href="{s}.html"' in sidebar for s in stems), stems
    order = re.findall(r'href="([\w.-]+)\.html"', sidebar)
    assert order[:2] == ['index', 'architecture'] and order[2:] == sorted(order[2:])
    assert not re.search(r'href="[^"]*\.ipynb', html)  # links between notebooks point at their pages
    assert 'href="01b_streaming.html"' in html

def test_chapter_shows_api_blocks_and_hides_directives(site):
    "nbdev's show_doc after each exported definition; no directive line, hidden cell, prompt or network resource"
    html = (site / '00_routing.html').read_text()
    block = html[html.index('<h3 id="softmax_topk">'):]
    block = block[:block.index('</table>')]
    assert '<strong>Details</strong>' in block and 'router logits' in block  # its docments table
    assert '#|' not in html and 'from fastcore.test import' not in html  # directives, `#| hide` cells
    text = re.sub(r'<[^>]+>', '', html)
    assert 'from edge0.files import InputError' not in text  # an exported cell shows as its API block, as in nbdev
    assert 'In&nbsp;[' not in html and 'Out[' not in html
    assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', html)

def test_show_doc_block_of_a_function():
    "The API block: name, signature, docstring, and the table of docments (trailing comments of the parameters)"
    from render_docs import ApiBlock
    def f(x: int,  # the input
          mode: str | None = None):  # how
        "Do a thing"
    md = ApiBlock(f, name='f')._repr_markdown_()
    assert md.startswith('### f\n') and 'f(x: int, mode: str | None = None)' in md and '*Do a thing*' in md
    assert '| x | int |  | the input |' in md and r'str \| None' in md  # a `|` escaped keeps the table's columns
    def g(x: int,
          # a comment too long for the parameter's line, written above it
          # over two lines
          y: int = 0,
          ) -> str:  # a | b
        "Do another"
    md = ApiBlock(g, name='g')._repr_markdown_()
    assert '| y | int | 0 | a comment too long for the parameter\'s line, written above it over two lines |' in md
    assert r'| **Returns** | **str** |  | **a \| b** |' in md  # each row one line, its `|` escaped

def chromium_or_skip() -> str:
    "The chromium executable; skips without one, except under CI (CI=1), where the browser check must run"
    from browser import chromium_path
    if exe := chromium_path(): return exe
    if os.environ.get('CI'): pytest.fail('CI is set but chromium is missing: `make test` installs it as root on Debian')
    pytest.skip('no chromium on PATH (apt-get install chromium; `make test` does so as root on Debian)')

def test_browser_check_catches_broken_pages(tmp_path):
    "The checker itself: a script error, a console error, a missing image, a stylesheet from the network, a dead link"
    exe = chromium_or_skip()
    from browser import Browser
    (tmp_path / 'bad.html').write_text(
        '<!doctype html><html><head><link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="https://cdn.invalid/x.css"></head><body><img src="missing.png">'
        '<script>undefinedFn()</script><script>console.error("boom")</script></body></html>')
    with Browser(exe) as b:
        errors = ' | '.join(b.open((tmp_path / 'bad.html').as_uri()))
        assert 'undefinedFn' in errors and 'boom' in errors and 'missing.png' in errors, errors
        assert 'network request: https://cdn.invalid/x.css' in errors, errors
        assert b.open((tmp_path / 'nothere.html').as_uri()) == [f'navigation: net::ERR_FILE_NOT_FOUND '
                                                              f'{(tmp_path / "nothere.html").as_uri()}']

def test_site_in_a_browser(site):
    "Each rendered page loads without a console error, its sidebar links resolve, long code scrolls inside its block"
    exe = chromium_or_skip()
    from browser import Browser
    rendered = {Path(n).stem for n in SITE}
    pages = [f'{p.stem}.html' for p in page_order(NBS.glob('*.ipynb'))]
    with Browser(exe) as b:
        for stem in sorted(rendered):
            errors = b.open((site / f'{stem}.html').as_uri())
            assert errors == [], (stem, errors)
            links = b.eval('[...document.querySelectorAll("nav.edge0-sidebar a")].map(a => a.getAttribute("href"))')
            assert links == pages, (stem, links)  # every notebook's page, in order (the full render makes them all)
            assert all((site / h).exists() for h in links if Path(h).stem in rendered), (stem, links)
            assert b.eval('document.querySelector("nav.edge0-sidebar a.active").getAttribute("href")') == f'{stem}.html'
            assert b.eval('document.title').startswith(b.eval('document.querySelector("h1.title").textContent'))
            assert b.eval('document.documentElement.scrollWidth <= innerWidth'), stem  # nothing widens the page
            assert not b.eval('[...document.querySelectorAll(".input_area")].filter(e => !e.textContent.trim()).length')
        b.open((site / '00_routing.html').as_uri())
        wide = b.eval('[...document.querySelectorAll("pre")].filter(p => p.scrollWidth > p.clientWidth)'
                      '.map(p => [getComputedStyle(p).whiteSpace, getComputedStyle(p).overflowX])')
        assert wide and all(w == ['pre', 'auto'] for w in wide), wide  # 00_routing has code lines wider than its column
    assert all((site / 'screenshots' / f'{s}.png').read_bytes()[:4] == b'\x89PNG' for s in ('index', '00_routing'))

def test_nbdev_sidebar_lists_every_notebook(capsys):
    "What nbdev_docs would give quarto (custom_sidebar = False: sidebar.yml is generated from the notebooks)"
    from nbdev.quarto import nbdev_sidebar
    nbdev_sidebar(path=NBS, printit=True)
    yml = capsys.readouterr().out
    assert all(f'- {p.name}' in yml for p in NBS.glob('*.ipynb'))
    assert 'architecture.ipynb' in (NBS / '_quarto.yml').read_text()  # and the navbar links it

def test_readme_opens_with_the_two_commands():
    text = (ROOT / 'README.md').read_text()
    first_code = text.index('```sh')
    assert text.index('make demo') > first_code and text.index('make test') > first_code
    assert text.index('make demo') < text.index('## What edge0 is')

def test_readme_links_resolve():
    "Every link of the README to the repository names one of its files, and none is relative (PyPI shows the README too)"
    from render_docs import repo_url
    text = (ROOT / 'README.md').read_text()
    links = re.findall(r'\]\(([^)\s]+)\)', text)
    assert not [t for t in links if not re.match(r'[a-z]+:|#', t)], 'relative links do not work on PyPI'
    ours = [t[len(repo_url()) + 1:] for t in links if t.startswith(repo_url() + '/')]
    assert 'nbs/architecture.ipynb' in ours
    missing = [t for t in ours if not (ROOT / t.split('#')[0]).exists()]
    assert not missing, missing
    assert 'DESIGN.md' not in text or (ROOT / 'DESIGN.md').exists()

def test_readme_is_up_to_date():
    from render_docs import readme
    assert (ROOT / 'README.md').read_text() == readme(), 'run: python tools/render_docs.py --readme'

def _pages_alone() -> list:
    "Each chapter's exported cells and nbdev's `show_doc` blocks run in order in a fresh shell: what fails, page by page"
    from functools import partial
    from execnb.shell import CaptureShell
    from render_docs import ApiBlock, notebook, show_doc
    failed = []
    here = os.getcwd()
    os.chdir(NBS)
    try:
        for p in page_order(NBS.glob('*.ipynb')):
            shell = CaptureShell()
            shell.user_ns['show_doc'] = partial(show_doc, renderer=ApiBlock)
            for c in notebook(p).cells:
                exported = any(d in c.directives_ for d in ('export', 'exports', 'exporti'))
                if c.cell_type != 'code' or not (exported or c.source.startswith('show_doc(')): continue
                shell.run(c.source)
                if shell.exc:
                    failed.append(f"{p.name}: {c.source.splitlines()[0]}: {type(shell.exc).__name__}: {shell.exc}")
                    break
    finally: os.chdir(here)
    return failed

def test_every_page_shows_its_api_on_its_own():
    """Rendering one page alone runs its exported cells and the `show_doc` blocks nbdev adds after them, in order, in a
    fresh interpreter (here a child: this process has imported the library, whose modules register things on import):
    a signature that names a class the chapter defines further down fails here"""
    code = (f"import json, sys; sys.path[:0] = [{str(ROOT / 'tests')!r}]; import test_docs; "
            "print('JSON ' + json.dumps(test_docs._pages_alone()))")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=900)
    lines = [l for l in r.stdout.splitlines() if l.startswith('JSON ')]
    assert r.returncode == 0 and lines, r.stderr[-2000:]
    assert json.loads(lines[-1][5:]) == []

def test_stored_outputs_follow_the_policy():
    "Small outputs kept, pictures at most 50 KB (`render_docs.py --shrink` holds them there), every chapter ends exporting"
    import base64
    from render_docs import PICTURE_BYTES, TEXT_BYTES, _text
    big = []
    for p in NBS.glob('*.ipynb'):
        cells = json.loads(p.read_text())['cells']
        for i, c in enumerate(cells):
            for o in c.get('outputs', []):
                png = o.get('data', {}).get('image/png')
                text = _text(o.get('text', '')) + _text(o.get('data', {}).get('text/plain', ''))
                if png and len(base64.b64decode(_text(png))) > PICTURE_BYTES: big.append(f"{p.name} cell {i}: picture")
                if len(text.encode()) > TEXT_BYTES: big.append(f"{p.name} cell {i}: {len(text) // 1024} KB of text")
        if p.stem[:2].isdigit() and 'nbdev_export()' not in ''.join(cells[-1]['source']):
            big.append(f"{p.name}: its last cell does not export")
    assert big == [], big

def test_shrink_keeps_a_picture_shown_at_its_size(tmp_path):
    "A retina plot over the limit comes back under it, as a PNG, shown at the same size and at least as wide"
    import base64, io
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from PIL import Image
    from render_docs import PICTURE_BYTES, _text, shrink
    fig, ax = plt.subplots(figsize=(12, 4))
    rng = __import__('numpy').random.default_rng(0)
    for i in range(6): ax.plot(rng.normal(size=100).cumsum(), label=f"run {i}")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format='png', dpi=250)
    plt.close(fig)
    png = buf.getvalue()
    assert len(png) > PICTURE_BYTES
    shown = {'image/png': {'width': 1500, 'height': 500}}  # as Jupyter stores a retina figure: shown at half its pixels
    nb = {'cells': [{'cell_type': 'code', 'source': ['plot()'], 'metadata': {}, 'execution_count': None, 'outputs': [
        {'output_type': 'display_data', 'metadata': shown, 'data': {'image/png': base64.b64encode(png).decode(),
                                                                 'text/plain': ['<Figure>']}}]}],
          'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
    p = tmp_path / 'plot.ipynb'
    p.write_text(json.dumps(nb))
    assert shrink(p) > 0 and shrink(p) == 0  # the second pass finds nothing to do
    out = json.loads(p.read_text())['cells'][0]['outputs'][0]
    small = base64.b64decode(_text(out['data']['image/png']))
    im = Image.open(io.BytesIO(small))
    assert small[:4] == b'\x89PNG' and len(small) <= PICTURE_BYTES
    assert out['metadata'] == shown and im.width >= 1500

def test_chapters_are_lessons():
    """The house rhythm (STYLE.md rule 4): an exported cell holds at most 30 lines and is followed by prose saying
    why before the next exported cell (a check may come between)"""
    bad = []
    for p in sorted(NBS.glob('*.ipynb')):
        last = None  # the id of an exported cell not yet followed by prose
        for c in json.loads(p.read_text())['cells']:
            src = ''.join(c['source'])
            exported = c['cell_type'] == 'code' and src.startswith('#| export')
            if exported:
                if len(src.rstrip().split('\n')) - 1 > 30: bad.append(f"{p.name} {c.get('id')}: over 30 lines")
                if last: bad.append(f"{p.name} {c.get('id')}: follows exported cell {last} with no prose between")
                last = c.get('id')
            elif c['cell_type'] == 'markdown' and src.strip(): last = None
    assert bad == [], bad[:10]
