"""Pure builders: a TpuTrainingJob and its plan in, Kubernetes objects (plain dicts) out."""
