"""The target's and the draft's forward pass on this machine: the interface a KV session runs and
the transformers forward (forwards.py), the lean forward (lean.py), its matrix kernels (matmul.py,
rows16.py and rows16.c, the choice kept by kernel_cache.py), precision and quantization
(precision.py, quantize.py), the CPU's features and threads (cpu.py, threads.py)."""
