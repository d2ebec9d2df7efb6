"""The long-running service: job store, job runner, control API, metrics."""
