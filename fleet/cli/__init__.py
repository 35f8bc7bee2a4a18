"""The command line: `fleet replay`, `compare`, `ingest`, `db`, `serve`, `status`, `explain` (typer), a thin shell over the core."""
