import os

# Nothing in the tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

# The test models are tiny: one thread avoids thread-sync overhead that dominates at this size.
torch.set_num_threads(1)
