"""The trio shell: listeners, per-connection pumps, upstream links, local handlers."""
