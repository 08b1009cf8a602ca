"""The reliability suite's guard: no test here may open a non-loopback connection.

The lead may move the import line into ``tests/conftest.py`` to guard the whole suite."""

from tests.reliability.network_guard import no_network  # noqa: F401  (an autouse fixture)
