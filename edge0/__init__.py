__version__ = "0.1.0"

# Written by hand beyond the version line (nbdev writes only that). torch's OpenMP threads spin while they wait for
# each other; a decode step makes some 300 parallel int4 products a token, and where another program uses the cores
# the spinning threads keep the one they wait for off its core: a step took 100x as long (bench/cpu_step.py's
# `contended` part). Sleeping threads cost nothing of that kind. It must be set before torch is loaded; a value the
# user set wins.
import os as _os
_os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
