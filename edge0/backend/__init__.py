"The backend facade: `core` (arrays, dtype policy, evaluation, memory), `nn`, `io`, `quant`. Only these modules import `mlx`."
