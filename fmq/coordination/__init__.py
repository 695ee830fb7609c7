"""A cluster through etcd: FMQ runs no consensus of its own. A broker group's leadership
(a lease), its registry, the users and the topic routes live in etcd; an operator's route
changes (:mod:`.cluster_admin`) and the cluster's status (:mod:`.cluster_status`) read and
change them there and ask the groups' primaries over the network (the client)."""
