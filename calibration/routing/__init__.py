"""Pre-generation routing: fitting the router (``fit``), prompt features, the routed and
route-then-cascade mechanisms as a policy serves them (``routed``, ``hybrid``) and each tier's
held-out choice among them and the cascade (``mechanisms``)."""
