"""The target's and the draft's forward pass on this machine: the lean forward (lean.py), its
matrix kernels (matmul.py, rows16.py and rows16.c), precision and quantization, CPU threads."""
