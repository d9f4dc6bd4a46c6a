"`edge0 bench` and the harness as a user meets them: the command, its report, its refusals."
import json, os, subprocess, sys
from pathlib import Path
import pytest
from edge0 import conditions as C, harness as E
from edge0.cli import main
from edge0.files import teacher_path

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=600)

ROOT_CGROUPS = sys.platform.startswith('linux') and os.geteuid() == 0 and 'blkio' in C._own_cgroups() and 'memory' in C._own_cgroups()

def test_bench_runs_the_protocol(edge0_cmd, tmp_path):
    out = tmp_path / 'r.json'
    r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', '--modes', 'off,compute,oracle', '--k', 8, '--rounds', 2,
            '--tokens', 3, '--pool-mib', 0.6, '--cold-steps', '--out', tmp_path, '--json', out)
    assert r.returncode == 0, r.stderr
    assert 'off/K8' in r.stdout and 'oracle/K8' in r.stdout and 'measured' in r.stdout
    rep = json.loads(out.read_text())['tiers']['nvme']
    res = rep['results']
    assert all(x['rounds'] == 2 and not x['failed'] for x in res.values())
    assert res['compute/K8']['same_tokens'] and res['oracle/K8']['same_tokens']  # exact arms, one forced sequence
    assert res['off/K8']['loads_per_step'] > 0 and 0 <= res['off/K8']['cold_fraction'] <= 1
    assert res['off/K8']['load_cost']['steps'] > 0
    assert all(len(v) == 2 for v in rep['runs'].values())  # every arm once per round

@pytest.mark.skipif(not ROOT_CGROUPS, reason='needs root and cgroup v1 memory and blkio controllers')
def test_bench_under_a_cap_and_a_tier(tmp_path):
    m = str(teacher_path('edge0-tiny'))
    rep = E.run([E.Arm(m, 'off', 8, pool_mib=0.6, cold_steps=True)], tokens=3, rounds=1, cap_mb=1500, tier='emmc',
                out=tmp_path, progress=False, routing=False)
    disk = C.measure_read(m, seconds=0.5)  # a disk slower than the tier reads at its own rate under the throttle
    measured = rep['measured_mb_s']  # the throttle holds
    assert rep['asked_mb_s'] == 277 and 0.8 * min(277, disk) < measured < 1.2 * 277, (measured, disk)
    assert rep['results']['off/K8']['rounds'] == 1
    rep = E.run([E.Arm(m, 'resident')], tokens=3, rounds=1, cap_mb=60, out=tmp_path, progress=False, routing=False)
    f = rep['results']['resident']
    assert f['rounds'] == 0 and f['failed'][0]['returncode'] != 0  # an arm that cannot fit fails; the run goes on
    assert 'failed every round' in E.table(rep)

def test_bench_refuses_clearly(edge0_cmd, monkeypatch, capsys):
    r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', '--tier', 'floppy')
    assert r.returncode == 2 and "storage tier 'floppy'" in r.stderr and 'Traceback' not in r.stderr
    r = run(edge0_cmd, 'bench', '--model', 'no-such-model')
    assert r.returncode == 2 and 'no-such-model' in r.stderr and 'Traceback' not in r.stderr
    r = run(edge0_cmd, 'bench', '--model', 'edge0-tiny', '--modes', 'off,fast')
    assert r.returncode == 2 and "'fast' is not one of" in r.stderr
    monkeypatch.setattr(C, '_own_cgroups', lambda: {'memory': Path('/proc/no-such-cgroup')})
    assert main(['bench', '--model', 'edge0-tiny', '--cap-mb', '500', '--tokens', '2', '--rounds', '1']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'cannot create a cgroup under /proc/no-such-cgroup' in err[0]

def test_cap_on_macos_is_reported_not_enforced(monkeypatch):
    monkeypatch.setattr(sys, 'platform', 'darwin')
    cg, later, notes = C.conditions(teacher_path('edge0-tiny'), cap_bytes=2**30)
    assert cg is None and later is None and 'not enforced on macOS' in notes[0]
    with pytest.raises(C.CgroupError, match='Linux cgroups; this is darwin'):
        C.conditions(teacher_path('edge0-tiny'), tier='usb')
