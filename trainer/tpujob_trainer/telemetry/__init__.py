"""What the trainer reports: JSON lines on stdout, memory phases, the peak for MFU, the HTTP
endpoint the operator scrapes (/metrics, /progress), and Weights & Biases."""
