"""Local mode: what runs tpujob on one machine without a cluster (an embedded API server, ...)."""
