"""State storage: a small key-value interface with in-memory and RocksDB adapters."""
