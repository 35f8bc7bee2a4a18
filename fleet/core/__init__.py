"""The pure core: the month model, scores, sizing, billing, the ideal operator, the hour-step, replay, verdict, compare.

Everything here is a function of data passed in (scenarios, months, the hour, seeded
streams, resolved policy objects). The core does no I/O and imports nothing from the
shell (`fleet.cli`, `fleet.service`, `fleet.ingest`, `fleet.report`), from `policies`
or from `storage`: they call into it, never the other way round. This file stays empty
so that importing one core module imports nothing else.
"""
