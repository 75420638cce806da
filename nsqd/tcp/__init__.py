"""nsqd's TCP shell: the accept loop dispatching on the protocol magic, V2 sessions, their
upgrades (TLS, snappy, deflate, AUTH), publishing and delivery."""
