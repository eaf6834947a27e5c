"""Certificates made at test time (annal.deploy.certs)."""

from annal.deploy.certs import Identity, issue, make_ca

__all__ = ["Identity", "issue", "make_ca"]
