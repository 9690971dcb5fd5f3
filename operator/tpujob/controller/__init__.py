"""The running operator: kopf handlers that validate, create and supervise TpuTrainingJobs, its
settings, its health and metrics endpoints, and the admission webhook."""
