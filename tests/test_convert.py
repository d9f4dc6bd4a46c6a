"`edge0 convert` as a user runs it."
import hashlib, json, os, signal, subprocess, time
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

def _files(d) -> dict:
    "`{relative path: sha256}` of every file under `d`"
    return {str(f.relative_to(d)): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(Path(d).rglob('*'))
            if f.is_file()}

def test_killed_convert_is_cleared_by_the_rerun(edge0_cmd, tmp_path):
    "`kill -9` midway: the temporary stays; the rerun removes it, even under a live pid, and writes DST whole"
    from edge0.zoo import build_tiny
    src = build_tiny('qwen3_moe', tmp_path / 'raw', bits=None, num_layers=4, num_experts=64, hidden=256,
                     expert_size=128)  # 50 MB: its convert writes for about half a second
    dst, ref = tmp_path / 'out', tmp_path / 'ref'
    assert run(edge0_cmd, 'convert', src, ref, '--quantize').returncode == 0
    temporaries = lambda: sorted(tmp_path.glob('.out.tmp-*'))
    writer = subprocess.Popen([edge0_cmd, 'convert', src, dst, '--quantize'], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    while writer.poll() is None and not any(f.is_file() for t in temporaries() for f in t.rglob('*')):
        time.sleep(0.002)  # until the writer has written a file into its temporary
    assert writer.poll() is None, 'the convert finished before it could be killed'
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert temporaries() and not dst.exists()  # a killed writer cannot clean up
    for t in temporaries():  # its pid reused, by a live process that is not the writer (as a container's rerun is)
        t.rename(t.with_name(t.name.replace(f".tmp-{writer.pid}-", f".tmp-{os.getpid()}-")))
    r = run(edge0_cmd, 'convert', src, dst, '--quantize')
    assert r.returncode == 0, r.stderr
    assert temporaries() == [] and _files(dst) == _files(ref)

_HALF = ("import sys; from edge0.files import replace_whole; "
         "replace_whole(sys.argv[1], lambda t: (t.write_text('half'), print(t, flush=True), sys.stdin.read()))")

def test_killed_file_write_is_cleared_by_the_next(tmp_path):
    "`kill -9` in the middle of `replace_whole`: the next write there removes its temporary, never a live writer's"
    import sys
    from edge0.files import replace_whole
    p = tmp_path / 'cache.npy'
    def writer():
        w = subprocess.Popen([sys.executable, '-c', _HALF, p], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return w, Path(w.stdout.readline().strip())
    dead, dead_tmp = writer()
    dead.kill()
    assert dead.wait() == -signal.SIGKILL and dead_tmp.read_text() == 'half'  # a killed writer cannot clean up
    live, live_tmp = writer()
    try:
        replace_whole(p, lambda t: t.write_text('whole'))
        assert p.read_text() == 'whole' and not dead_tmp.exists() and live_tmp.read_text() == 'half'
    finally: live.kill()
    live.wait()
    replace_whole(p, lambda t: t.write_text('again'))
    assert [f.name for f in tmp_path.iterdir()] == ['cache.npy'] and p.read_text() == 'again'
