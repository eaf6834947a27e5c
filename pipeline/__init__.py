"""Data pipelines: annal as a Spark data source."""
