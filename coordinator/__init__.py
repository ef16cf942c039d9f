"""Embedded consumer-group coordinator and cluster-wide feature versioning (KIP-584)."""
