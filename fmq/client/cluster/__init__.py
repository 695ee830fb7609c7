"""The client's side of a cluster (docs/cluster.md, docs/client.md "Routing"): topics routed
over several broker groups. A client talks to each broker group on its own **link** (one
connection to the group's primary, :class:`fmq.client.acquire.Link`); outside a cluster it
has one link, :data:`~fmq.client.acquire.OWN_LINK`, to the servers it was given.

* :mod:`.route_table`: a topic's route as ROUTE answers it, and when to read it again;
* :mod:`.placement`: which broker group and queue each message goes to (no I/O);
* :mod:`.router`: what both producers keep for routing, and each request placed on a link;
* :mod:`.sends`: the threaded producer's route reads and send loop;
* :mod:`.consumers`: a consumer's one consumer per broker group.
"""
