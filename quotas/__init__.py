"""KIP-612 connection-creation quotas: Kafka's sampled rate and accept decisions (sans-IO)."""
