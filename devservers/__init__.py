"""Local stand-ins for the services the pipeline reads, for the tests and the demo."""
