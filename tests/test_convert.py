"`edge0 convert` as a user runs it."
import json, subprocess
from pathlib import Path

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=300)

def test_quantize_and_repack_then_stream(edge0_cmd, tmp_path):
    from edge0.zoo import build_tiny
    raw = build_tiny('deepseek_v3', tmp_path / 'raw', bits=None, num_layers=3)
    r = run(edge0_cmd, 'convert', raw, tmp_path / 'int4', '--quantize')
    assert r.returncode == 0, r.stderr
    files = sorted(f.name for f in (tmp_path / 'int4').iterdir())
    assert 'model-experts-L001.safetensors' in files and 'model-experts-L002.safetensors' in files
    assert json.loads((tmp_path / 'int4' / 'config.json').read_text())['quantization']['bits'] == 4
    r = run(edge0_cmd, 'generate', '--model', tmp_path / 'int4', '--prompt', 'hello', '--max-tokens', 5, '--stats')
    assert r.returncode == 0 and 'decode 5 tokens' in r.stdout, r.stderr

def test_refusals_leave_destination_alone(edge0_cmd, tiny_qwen, tmp_path):
    dst = tmp_path / 'out'; dst.mkdir(); (dst / 'keep.txt').write_text('mine')
    r = run(edge0_cmd, 'convert', tiny_qwen, dst)
    assert r.returncode == 2 and 'exists' in r.stderr
    r = run(edge0_cmd, 'convert', tiny_qwen, tmp_path / 'q', '--quantize', '--no-repack')
    assert r.returncode == 2 and 'already quantized' in r.stderr
    assert (dst / 'keep.txt').read_text() == 'mine' and not (tmp_path / 'q').exists()
    assert not list(tmp_path.glob('.*tmp-*'))
