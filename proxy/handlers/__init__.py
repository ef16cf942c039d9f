"""Requests the sidecar answers itself, one module per API."""
