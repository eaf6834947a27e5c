"""The broker's side of security: the authorizer and the ACL and SCRAM admin
requests with the store behind them (docs/security.md)."""
