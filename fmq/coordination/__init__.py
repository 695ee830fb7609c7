"""Leadership of a broker group through a lease in etcd: FMQ runs no consensus of its own."""
