"""The pure dedup core: no Kafka, Faust or RocksDB imports below this package."""
