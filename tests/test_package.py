"""The package as a user gets it: installed dependencies inside the ranges pyproject.toml pins, and a wheel that
builds without warnings, leaves out the bf16 teachers and works in a fresh venv, from outside the repository,
without torch or the lm-evaluation-harness."""
import os, shutil, subprocess, sys, sysconfig, tomllib, zipfile
from importlib.metadata import version
from pathlib import Path
import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TEACHERS = ('edge0-tiny', 'edge0-tiny-ds', 'edge0-tiny-code', 'edge0-tiny-q35')  # bf16, training only: not shipped
DEMOS = {'edge0-tiny-int4': ('lora-k4', 'lora-k8', 'prerouter-k4'), 'edge0-tiny-ds-int4': ('lora-k2', 'lora-k4'),
         'edge0-tiny-code-int4': ('lora-k4', 'lora-k8', 'lora-k4-top1', 'lora-k8-top1', 'prerouter-k4'),
         'edge0-tiny-q35-int4': ('lora-k2', 'lora-k4', 'prerouter-k2')}
HIDDEN = ('torch', 'lm_eval', 'matplotlib')  # the `torch`, `eval` and `notebooks` extras (dist-infos too)


def runtime_requirements() -> list:
    "pyproject's dependencies that apply to this platform"
    deps = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['dependencies']
    return [r for r in map(Requirement, deps) if r.marker is None or r.marker.evaluate()]

def test_installed_versions_are_in_the_pinned_range():
    "CI tests the range pyproject promises: every runtime dependency installed here satisfies its specifier"
    reqs = {r.name: r for r in runtime_requirements()}
    assert {'mlx', 'mlx-lm'} <= set(reqs)
    for name in ('mlx', 'mlx-lm'): assert any(s.operator == '<' for s in reqs[name].specifier), f"{name} has no cap"
    outside = {n: version(n) for n, r in reqs.items() if not r.specifier.contains(version(n), prereleases=True)}
    assert not outside, f"installed outside pyproject's ranges: {outside}"


def _build(tmp:Path) -> tuple:
    "Build the wheel and the sdist from a copy of what they are made of; `(wheel, sdist, build output)`"
    src = tmp / 'src'
    src.mkdir()
    for f in ('pyproject.toml', 'README.md', 'LICENSE'): shutil.copy2(ROOT / f, src / f)
    shutil.copytree(ROOT / 'edge0', src / 'edge0', ignore=shutil.ignore_patterns('__pycache__'))
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}  # else setuptools warns it skips
    built, log = [], ''
    for kind in ('sdist', 'wheel'):  # one process each, as a build frontend does it
        code = f"import sys\nfrom setuptools import build_meta\nprint('BUILT', build_meta.build_{kind}(sys.argv[1]))"
        r = subprocess.run([sys.executable, '-c', code, str(tmp)], cwd=src, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        built.append(tmp / r.stdout.split('BUILT ')[-1].strip())
        log += r.stdout + r.stderr
    return built[1], built[0], log

@pytest.fixture(scope='module')
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp('build'))

def test_build_has_no_warnings(built):
    assert not [l for l in built[2].splitlines() if 'warn' in l.lower()], built[2][-3000:]

def _assert_ships_demos_not_teachers(names:list, prefix:str=''):
    for t in TEACHERS: assert not [n for n in names if n.startswith(f'{prefix}edge0/models/{t}/')], t
    for d, adapters in DEMOS.items():
        for f in ('config.json', 'tokenizer.json', 'model.safetensors', 'prerouter.safetensors',
                  *[f'{a}.safetensors' for a in adapters]):
            assert f'{prefix}edge0/models/{d}/{f}' in names, f'{d}/{f}'
    assert [n for n in names if n.startswith(f'{prefix}edge0/data/heldout-')]
    for f in ('LICENSE.md', 'austen.jsonl.gz', 'python.jsonl.gz', 'shakespeare.jsonl.gz', 'wiki.jsonl.gz'):
        assert f'{prefix}edge0/data/calibration/{f}' in names, f  # the bundled calibration set

def test_wheel_and_sdist_ship_the_int4_demos_not_the_teachers(built):
    import tarfile
    wheel, sdist, _ = built
    _assert_ships_demos_not_teachers(zipfile.ZipFile(wheel).namelist())
    with tarfile.open(sdist) as t: _assert_ships_demos_not_teachers(t.getnames(), f'{sdist.name[:-len(".tar.gz")]}/')


def _fresh_venv(tmp:Path, wheel:Path) -> Path:
    """A venv with the wheel installed and no network: the dependencies come from this venv's site-packages by a
    `.pth` line (whose own .pth files are not processed), less edge0's editable install, torch and lm_eval"""
    venv = tmp / 'fresh'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True, timeout=120)
    py = venv / 'bin' / 'python'
    site = Path(subprocess.run([py, '-c', "import sysconfig\nprint(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = tmp / 'deps'  # this venv's site-packages without edge0 and the hidden extras, as links
    deps.mkdir()
    for p in Path(sysconfig.get_path('purelib')).iterdir():
        if not p.name.lower().startswith(HIDDEN + ('edge0', '__editable__')): (deps / p.name).symlink_to(p)
    (site / 'dev_deps.pth').write_text(f"{deps}\n")
    subprocess.run([sys.executable, '-m', 'pip', '--python', str(py), 'install', '--no-deps', '--no-index', '-q',
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return venv

def _run(venv:Path, *cmd, cwd:Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    return subprocess.run([str(venv / 'bin' / cmd[0]), *cmd[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)

def test_the_wheel_works_in_a_fresh_venv(built, tmp_path):
    venv, away = _fresh_venv(tmp_path, built[0]), tmp_path / 'elsewhere'
    away.mkdir()
    r = _run(venv, 'python', '-c', "import edge0\nfrom edge0.backend.quant import default_kernels\n"
             "print(edge0.__file__)\nprint(default_kernels())", cwd=away)
    assert r.returncode == 0, r.stderr
    where, kernels = r.stdout.split()
    pkg = Path(where).parent
    assert pkg.is_relative_to(venv), f"edge0 came from {where}, not the fresh venv"
    assert kernels == 'mlx'  # no torch: MLX's kernels
    assert not [t for t in TEACHERS if (pkg / 'models' / t).exists()]
    r = _run(venv, 'edge0', '--version', cwd=away)
    assert r.returncode == 0 and r.stdout.startswith('edge0 '), r.stdout + r.stderr
    r = _run(venv, 'python', '-m', 'edge0', 'spec', 'edge0-tiny', cwd=away)
    assert r.returncode == 0 and 'qwen3_moe' in r.stdout, r.stdout + r.stderr
    r = _run(venv, 'edge0', 'generate', '--model', 'edge0-tiny', '--prompt', 'The history of the city',
             '--max-tokens', '8', '--ignore-chat-template', cwd=away)
    assert r.returncode == 0 and 'decode 8 tokens' in r.stdout, r.stdout + r.stderr
    r = _run(venv, 'python', '-m', 'edge0.lmeval', '--help', cwd=away)
    assert r.returncode != 0 and r.stderr.strip() == "error: edge0.lmeval needs the lm-evaluation-harness: pip install "\
        "'edge0[eval]'", r.stderr
    r = _run(venv, 'edge0', 'bench', '--model', 'edge0-tiny', '--plot', str(tmp_path / 'tiers.png'), cwd=away)
    assert r.returncode == 2 and r.stderr.strip().endswith("needs matplotlib: pip install 'edge0[notebooks]'"), r.stderr
    teacher = "from edge0.files import teacher_path\nprint(teacher_path('edge0-tiny', int4=False))"
    r = _run(venv, 'python', '-c', teacher, cwd=away)
    assert r.returncode != 0 and 'EDGE0_MODELS' in r.stderr and 'edge0 train edge0-tiny' in r.stderr, r.stderr
