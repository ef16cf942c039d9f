"""KIP-388 observers: the Observer contract, the fan-out hub and the Parquet audit trail."""
