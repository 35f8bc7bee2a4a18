"""fleet: autoscaler and eviction-policy service for rented GPU pools serving LLM tokens."""
