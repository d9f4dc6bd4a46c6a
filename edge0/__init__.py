__version__ = "0.1.0"

# Written by hand beyond the version line (nbdev writes only that). A torch step makes some 300 parallel int4 products
# a token, and between them torch's OpenMP threads wait on each other. libgomp's default has a waiting thread spin for
# about 3 ms first: beside another program computing on the same cores, a spinning thread keeps the one it waits for
# off its core. Measured here (bench/cpu_step.py, part `contended`): a short spin before sleeping (GOMP_SPINCOUNT=10000)
# decoded fastest alone and beside another program; sleeping at once (OMP_WAIT_POLICY=PASSIVE, which other OpenMP
# runtimes also read) lost a sixth alone. Set before torch is loaded; a value the user set wins.
import os as _os
_WAIT = dict(OMP_WAIT_POLICY='PASSIVE', GOMP_SPINCOUNT='10000')
# what this import set (a benchmark runs other programs, which read them too, without them)
OPENMP_SET = tuple(k for k in _WAIT if k not in _os.environ)
for _k, _v in _WAIT.items(): _os.environ.setdefault(_k, _v)
