"""The catalog by API: pools, for platform automation."""
