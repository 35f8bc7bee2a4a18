"""fleet: autoscaler and eviction-policy service for rented GPU pools serving LLM tokens."""

DISTRIBUTION = "fleet-autoscaler"
"""The name the project installs under (`fleet` on PyPI is another project); the import package and the command are
`fleet`."""
