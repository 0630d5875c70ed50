import os

# Nothing in the tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Kernel choices measured by the tests stay in this run (and its servers), not in the user's cache.
if "SPECFILL_KERNEL_CACHE" not in os.environ:
    import tempfile
    os.environ["SPECFILL_KERNEL_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="specfill-kernels-"), "kernels.json")
# and so do the quantized weights they load
if "SPECFILL_WEIGHT_CACHE" not in os.environ:
    import tempfile
    os.environ["SPECFILL_WEIGHT_CACHE"] = tempfile.mkdtemp(prefix="specfill-weights-")
# and their tokenizers' kept loads
if "SPECFILL_VOCAB_CACHE" not in os.environ:
    import tempfile
    os.environ["SPECFILL_VOCAB_CACHE"] = tempfile.mkdtemp(prefix="specfill-vocab-")

import torch  # noqa: E402

# The test models are tiny: one thread avoids thread-sync overhead that dominates at this size.
torch.set_num_threads(1)
