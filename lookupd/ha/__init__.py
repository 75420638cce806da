"""High availability on etcd v3: the etcd client, its pure codec, and the lookupds' leadership."""
