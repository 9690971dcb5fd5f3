"""tpujob: a Kubernetes operator that runs JAX training on Google Cloud TPU slices."""

__version__ = "0.1.0"
