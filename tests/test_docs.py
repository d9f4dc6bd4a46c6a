"The offline docs rendering (no quarto here) and the README that is generated from nbs/index.ipynb."
import subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def test_offline_html_renders_index(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / 'tools' / 'render_docs.py'), '--out', str(tmp_path), str(ROOT / 'nbs' / 'index.ipynb')],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    html = (tmp_path / 'index.html').read_text()
    assert 'Two commands' in html and 'sigmoid_group (1, 2, 3)' in html  # prose and a fresh output

def test_readme_opens_with_the_two_commands():
    text = (ROOT / 'README.md').read_text()
    first_code = text.index('```sh')
    assert text.index('make demo') > first_code and text.index('make test') > first_code
    assert text.index('make demo') < text.index('## What edge0 is')
