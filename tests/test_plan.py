"`edge0 plan` as a user runs it: a public shape on a named device, this machine measured, and the refusals."
import json, os, subprocess
import pytest

def plan(edge0_cmd, *argv, env=None, timeout=600):
    "The console script, in its own process"
    return subprocess.run([edge0_cmd, 'plan', *argv], capture_output=True, text=True, timeout=timeout, env=env)

def test_public_shape_on_a_named_device(edge0_cmd, tmp_path):
    r = plan(edge0_cmd, 'qwen3-30b-a3b', '--device', 'edge-8gb-emmc', '--json', str(tmp_path / 'p.json'))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert 'qwen3_moe on 8 GB edge board, eMMC, K=8' in out and 'shape estimate' in out
    rows = json.loads((tmp_path / 'p.json').read_text())['rows']
    assert list(rows) == ['ram', 'static', 'off', 'routing']
    assert rows['ram']['tps'] is None and rows['ram']['binds'].startswith('memory')  # 16 GiB does not fit in 6.5
    assert all(rows[s]['binds'].startswith(('A1', 'A2')) for s in ('static', 'off', 'routing'))
    assert 0.1 < rows['static']['tps'] < 5  # eMMC-bound: the paper reports it pinned at the eMMC ceiling

def test_overrides_move_the_prediction():
    "A faster disk and more memory make streaming faster; enough memory makes everything fit"
    from edge0.plan_verdict import plan_for
    args = dict(model='qwen3-30b-a3b', device='edge-8gb-emmc', strategies=('ram', 'off'))
    s, f, b = (plan_for(**args, **kw)['rows'] for kw in ({}, dict(tier='sata'), dict(ram_mb=20000)))
    assert f['off']['tps'] > 1.5 * s['off']['tps']
    assert b['ram']['fits'] and b['ram']['tps'] > b['off']['tps']

def test_this_machine_measured(edge0_cmd, tmp_path):
    "--device here measures the bundled model on this machine (cached in EDGE0_CACHE) and plans from it"
    env = dict(os.environ, EDGE0_CACHE=str(tmp_path / 'cache'))
    r = plan(edge0_cmd, 'edge0-tiny', '--k', '4', '--json', str(tmp_path / 'p.json'), env=env)
    assert r.returncode == 0, r.stderr
    p = json.loads((tmp_path / 'p.json').read_text())
    assert p['compute'] == 'measured' and p['device'].startswith('this machine, nvme')
    assert all(p['rows'][s]['tps'] > 0 for s in ('ram', 'static', 'off', 'routing'))
    assert {d.name for d in (tmp_path / 'cache').iterdir()} >= {'compute', 'trace', 'eta'}

def test_a_model_without_heads(edge0_cmd, tiny_qwen, tmp_path):
    "No heads and no --recall: every other strategy is planned and one line says why routing is not; --recall plans it"
    env = dict(os.environ, EDGE0_HOME=str(tmp_path / 'home'))
    r = plan(edge0_cmd, str(tiny_qwen), '--device', 'mac-16gb', '--json', str(tmp_path / 'p.json'), env=env)
    assert r.returncode == 0, r.stderr
    (line,) = [l for l in r.stdout.splitlines() if 'routing' in l]
    assert line.startswith('routing not planned') and f'edge0 train {tiny_qwen} --phase heads --k 4' in line, r.stdout
    assert list(json.loads((tmp_path / 'p.json').read_text())['rows']) == ['ram', 'static', 'off']
    r = plan(edge0_cmd, str(tiny_qwen), '--device', 'mac-16gb', '--recall', '0.8', env=env)
    assert r.returncode == 0 and "routing's recall: --recall 0.8" in r.stdout, r.stderr
    assert any(l.startswith('routing ') for l in r.stdout.splitlines())

@pytest.mark.parametrize('argv, words', [
    (('qwen3-30b-a3b',), 'needs its weights'),
    (('edge0-tiny', '--device', 'laptop'), "device 'laptop': expected here or one of edge-8gb-emmc, mac-16gb"),
    (('edge0-tiny', '--device', 'mac-16gb', '--tier', 'floppy'), "storage tier 'floppy'"),
    (('edge0-tiny', '--device', 'mac-16gb', '--recall', '2'), '--recall 2.0: expected 0 to 1'),
    (('no-such-model',), 'no-such-model'),
    (('edge0-tiny', '--strategies', 'ram,mmap'), "'mmap' is not one of ram, static, off, routing"),
    (('edge0-tiny', '--k', '0'), 'must be above 0'),
])
def test_refusals_are_one_line(argv, words, capsys):
    "Exit status 2 and one line naming what is wrong (in-process: the same `main` the console script runs)"
    from edge0.cli import main
    try: rc = main(['plan', *argv])
    except SystemExit as e: rc = e.code  # argparse's own refusals
    err = capsys.readouterr().err
    assert rc == 2
    *usage, last = err.strip().splitlines()  # argparse prints its usage first; the error is one line
    assert last.startswith('edge0 plan: error: ') and words in last and 'Traceback' not in err, err
    assert all(u.startswith(('usage:', ' ')) for u in usage), usage
