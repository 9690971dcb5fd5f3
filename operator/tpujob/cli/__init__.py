"""The `tpujob` command line."""
