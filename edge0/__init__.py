__version__ = "0.1.0"

# Written by hand beyond the version line (nbdev writes only that). A torch step makes some 300 parallel int4 products
# a token, and between them torch's OpenMP threads wait on each other. libgomp's default has a waiting thread spin for
# about 3 ms first: beside another program computing on the same cores, a spinning thread keeps the one it waits for
# off its core. Measured here (bench/cpu_step.py, part `contended`): a short spin before sleeping (GOMP_SPINCOUNT=10000)
# decoded fastest alone and beside another program; sleeping at once (OMP_WAIT_POLICY=PASSIVE, which other OpenMP
# runtimes also read) lost a sixth alone. Set before torch is loaded; a value the user set wins.
import os as _os
_os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
_os.environ.setdefault('GOMP_SPINCOUNT', '10000')
