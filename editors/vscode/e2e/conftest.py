# The main suite's settings apply here too (offline, no progress bars, one torch thread), so the
# tiny models build as fast as in tests/ and the same way.
import tests.conftest  # noqa: F401
