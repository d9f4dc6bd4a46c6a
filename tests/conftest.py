import os, shutil, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent

@pytest.fixture(scope='session', autouse=True)
def edge0_home(tmp_path_factory):
    """What edge0 keeps outside a model's folder (prompt caches, usage profiles, heads of read-only models) goes to a
    folder of this test run, so no run reads what another left; the measurements stay where they were (EDGE0_CACHE)"""
    from edge0.files import cache_dir
    os.environ.setdefault('EDGE0_CACHE', str(cache_dir()))
    os.environ['EDGE0_HOME'] = str(tmp_path_factory.mktemp('edge0-home'))

@pytest.fixture(scope='session')
def edge0_cmd():
    "The installed `edge0` console script"
    exe = BIN / 'edge0'
    if not exe.exists(): exe = Path(shutil.which('edge0') or '')
    assert exe.is_file(), "the edge0 console script is not installed (pip install -e .)"
    return str(exe)

@pytest.fixture(scope='session')
def tiny_qwen(tmp_path_factory):
    "A tiny int4 Qwen3-MoE checkpoint built once per session"
    from edge0.zoo import build_tiny
    return build_tiny('qwen3_moe', tmp_path_factory.mktemp('zoo') / 'qwen3_moe')

@pytest.fixture(scope='session')
def tiny_torch(tmp_path_factory):
    "The bundled edge0-tiny converted to the torch-cpu layout (experts packed for torch's int4 kernel), once per session"
    from edge0.convert import convert
    from edge0.files import teacher_path
    return convert(teacher_path('edge0-tiny'), tmp_path_factory.mktemp('tt') / 'edge0-tiny-torch', layout='torch-cpu')
