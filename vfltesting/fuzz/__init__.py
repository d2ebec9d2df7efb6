"""The fuzz campaign: random and mutated messages at every RPC of a live service (make fuzz, bench-fuzz)."""
