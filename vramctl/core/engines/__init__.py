"""Engine semantics by version: one module per engine, each fact citing its source."""
