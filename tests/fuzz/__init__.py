"""The socket-level fuzzer: recorded client sessions (``corpus/``), a seeded mutator, and a
driver that sends mutated sessions to a running nsqd and checks it survives them."""
