"The offline docs rendering (no quarto here), the architecture page, and the README that is generated from nbs/index.ipynb."
import re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'

def render(out: Path, *notebooks: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / 'tools' / 'render_docs.py'), '--out', str(out), *[str(NBS / n) for n in notebooks]],
                          capture_output=True, text=True, timeout=300)

def test_offline_html_renders_index(tmp_path):
    r = render(tmp_path, 'index.ipynb')
    assert r.returncode == 0, r.stderr
    html = (tmp_path / 'index.html').read_text()
    assert 'Two commands' in html and 'sigmoid_group (1, 2, 3)' in html  # prose and a fresh output

def test_architecture_page_renders_with_every_page_in_the_sidebar(tmp_path):
    r = render(tmp_path, 'architecture.ipynb')
    assert r.returncode == 0, r.stderr
    html = (tmp_path / 'architecture.html').read_text()
    for words in ('The layers', 'whole_layer', 'prerouter-k{K}.safetensors', 'edge0-trace/1', 'Contracts', 'Chapters and modules'):
        assert words in html, words
    sidebar = html[html.index('<nav class="edge0-sidebar">'):html.index('</nav>')]
    stems = [p.stem for p in NBS.glob('*.ipynb')]
    assert all(f'href="{s}.html"' in sidebar for s in stems), stems
    order = re.findall(r'href="([\w.-]+)\.html"', sidebar)[1:]  # after the site name
    assert order[:2] == ['index', 'architecture'] and order[2:] == sorted(order[2:])
    assert '.ipynb"' not in html  # links between notebooks point at their pages
    assert 'href="01b_streaming.html"' in html

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
    "Every relative link of the README names a file of the repository (so it works on GitHub); none to a missing DESIGN.md"
    text = (ROOT / 'README.md').read_text()
    links = [t for t in re.findall(r'\]\(([^)\s]+)\)', text) if not re.match(r'[a-z]+:|#', t)]
    assert 'nbs/architecture.ipynb' in links
    missing = [t for t in links if not (ROOT / t.split('#')[0]).exists()]
    assert not missing, missing
    assert 'DESIGN.md' not in text or (ROOT / 'DESIGN.md').exists()

def test_readme_is_up_to_date():
    sys.path.insert(0, str(ROOT / 'tools'))
    from render_docs import readme
    assert (ROOT / 'README.md').read_text() == readme(), 'run: python tools/render_docs.py --readme'
