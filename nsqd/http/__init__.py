"""nsqd's HTTP shell: the nsqd 1.3 API, admin endpoints, range read and offsets."""
