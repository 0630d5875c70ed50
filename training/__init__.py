"""Training of specfill's built-in default model pair (see training/README.md)."""
