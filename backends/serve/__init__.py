"""Queue services' wire protocols served over the in-memory engine (`backends.memory`)."""
