"""TensorFlow's adapters: eager (`eager.py`) and TensorFlow 1's graph mode (`graph_mode.py`), built from the same
pieces (`building.py`, `traced_ops.py`, `wording.py`); `tracing.py` keeps what tracing leaves behind tied to the op."""
