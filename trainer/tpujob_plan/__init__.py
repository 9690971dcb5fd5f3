"""Pure planning shared by the operator and the trainer: the TPU slice catalog, slice math,
mesh planning and the per-device memory estimate. No JAX, no Kubernetes, no I/O."""
