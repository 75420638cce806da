"""lookupd's TCP listener: protocol V1 registrations from nsqds."""
