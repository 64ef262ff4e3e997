"""torchdev's Prometheus exporter: the cluster's DevServers as metrics (docs/metrics.md)."""
