"""``annal console``: a web console for operators (docs/operations.md, "The web console").

``app`` serves the pages and their JSON, ``cluster_view`` reads the cluster
through annal's client libraries, ``sampler`` keeps an hour of offsets for
lag and rate charts, ``browser`` reads records, ``actions`` changes things.
"""
