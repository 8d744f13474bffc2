"""stream-dedupe: near-duplicate removal for document ingestion streams."""

__version__ = "0.1.0"
