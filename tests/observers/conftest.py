"""Fixtures for observer tests: the proxy tests' in-process sidecar starter."""

from tests.proxy.conftest import start_sidecar

__all__ = ["start_sidecar"]
