"""nsqlookupd's options and command line."""
